// GPU tensors through the public API on a GPU: copies, every op on logical peers of one GPU,
// every dtype, many consecutive ops, gradient sync, and peers on distinct GPUs. These cases run
// where a CUDA device is present and report themselves skipped, visibly, where none is (CI and
// the development machines have no GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <chorus/chorus.hpp>
#include <chorus/gpu.hpp>
#include <chorus/grad_sync.hpp>
#include "cuda/gpu.hpp"
#include "cuda/user_streams.hpp"
#include "peer_harness.hpp"
#include "require_gpus.hpp"
#include "status_matchers.hpp"
#include "strategies/reduce_kernels.hpp"

namespace {

using namespace chorus;
using harness::config_for;
using harness::run_peers;

// Peer p's input element k: small integers, exact in every dtype (f16/bf16 included) when summed.
template <class T>
std::vector<T> input_of(uint32_t p, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t k = 0; k < n; ++k) v[k] = static_cast<T>(p + 1 + k % 7);
  return v;
}

Tensor on_gpu(const Tensor& host, int device = 0) { return host.to(Device::cuda(device)); }

TEST(DeviceTensorsOnGpu, CopiesRoundTrip) {
  REQUIRE_GPUS(1);
  std::vector<double> v{1.5, -2, 3e100, 0};
  Tensor d = on_gpu(Tensor::from(v));
  EXPECT_TRUE(d.is_cuda());
  EXPECT_EQ(d.to_vector<double>(), v);
  Tensor z = Tensor::zeros(DType::i64, {3}, Device::cuda(0));
  EXPECT_EQ(z.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0}));
  z.copy_from(Tensor::from(std::vector<int64_t>{7, 8, 9}));
  EXPECT_EQ(z.to_vector<int64_t>(), (std::vector<int64_t>{7, 8, 9}));
}

// Every op with 4 logical peers sharing GPU 0, results checked element by element.
TEST(DeviceTensorsOnGpu, EveryOpOnLogicalPeersOfOneGpu) {
  REQUIRE_GPUS(1);
  constexpr uint32_t n = 4;
  constexpr std::size_t count = 1000;  // per-peer block; not a multiple of the vector width
  Runtime rt;
  run_peers(rt, config_for(n, "auto", 60000), [&](Peer& p) {
    const uint32_t me = p.id();
    auto in = on_gpu(Tensor::from(input_of<float>(me, count)));
    auto expect_sum = [&](std::size_t k, uint32_t block = 0) {
      float s = 0;
      for (uint32_t j = 0; j < n; ++j) s += input_of<float>(j, (block + 1) * count)[block * count + k];
      return s;
    };
    {  // all_reduce, out of place and in place
      Tensor out = Tensor::zeros(DType::f32, {count}, Device::cuda(0));
      ASSERT_TRUE(p.all_reduce(in, out, ReduceOp::sum).is_ok());
      auto r = out.to_vector<float>();
      for (std::size_t k = 0; k < count; ++k) ASSERT_EQ(r[k], expect_sum(k)) << k;
      Tensor io = on_gpu(Tensor::from(input_of<float>(me, count)));
      ASSERT_TRUE(p.all_reduce(io, ReduceOp::max).is_ok());
      r = io.to_vector<float>();
      for (std::size_t k = 0; k < count; ++k) ASSERT_EQ(r[k], static_cast<float>(n + k % 7)) << k;
    }
    {  // reduce to root 2 (avg)
      Tensor out = Tensor::zeros(DType::f32, {count}, Device::cuda(0));
      ASSERT_TRUE(p.reduce(in, out, ReduceOp::avg, 2).is_ok());
      auto r = out.to_vector<float>();
      for (std::size_t k = 0; k < count; ++k) ASSERT_FLOAT_EQ(r[k], me == 2 ? expect_sum(k) / n : 0.f) << k;
    }
    {  // broadcast from 1
      Tensor b = on_gpu(Tensor::from(input_of<float>(me, count)));
      ASSERT_TRUE(p.broadcast(b, 1).is_ok());
      EXPECT_EQ(b.to_vector<float>(), input_of<float>(1, count));
    }
    {  // all_gather
      Tensor out = Tensor::zeros(DType::f32, {n * count}, Device::cuda(0));
      ASSERT_TRUE(p.all_gather(in, out).is_ok());
      auto r = out.to_vector<float>();
      for (uint32_t j = 0; j < n; ++j)
        ASSERT_EQ(std::vector<float>(r.begin() + j * count, r.begin() + (j + 1) * count), input_of<float>(j, count));
    }
    {  // reduce_scatter
      auto big = on_gpu(Tensor::from(input_of<float>(me, n * count)));
      Tensor out = Tensor::zeros(DType::f32, {count}, Device::cuda(0));
      ASSERT_TRUE(p.reduce_scatter(big, out, ReduceOp::sum).is_ok());
      auto r = out.to_vector<float>();
      for (std::size_t k = 0; k < count; ++k) ASSERT_EQ(r[k], expect_sum(k, me)) << k;
    }
    {  // all_to_all
      auto big = on_gpu(Tensor::from(input_of<float>(me, n * count)));
      Tensor out = Tensor::zeros(DType::f32, {n * count}, Device::cuda(0));
      ASSERT_TRUE(p.all_to_all(big, out).is_ok());
      auto r = out.to_vector<float>();
      for (uint32_t j = 0; j < n; ++j) {
        auto src = input_of<float>(j, n * count);
        for (std::size_t k = 0; k < count; ++k) ASSERT_EQ(r[j * count + k], src[me * count + k]) << j << " " << k;
      }
    }
    {  // gather to 3, scatter from 0
      Tensor out = Tensor::zeros(DType::f32, {n * count}, Device::cuda(0));
      ASSERT_TRUE(p.gather(in, out, 3).is_ok());
      if (me == 3) {
        auto r = out.to_vector<float>();
        for (uint32_t j = 0; j < n; ++j)
          ASSERT_EQ(std::vector<float>(r.begin() + j * count, r.begin() + (j + 1) * count), input_of<float>(j, count));
      }
      auto big = on_gpu(Tensor::from(input_of<float>(me, n * count)));
      Tensor part = Tensor::zeros(DType::f32, {count}, Device::cuda(0));
      ASSERT_TRUE(p.scatter(big, part, 0).is_ok());
      auto src = input_of<float>(0, n * count);
      EXPECT_EQ(part.to_vector<float>(), std::vector<float>(src.begin() + me * count, src.begin() + (me + 1) * count));
    }
    {  // send/recv around a ring, then a barrier
      Tensor mine = on_gpu(Tensor::from(input_of<float>(me, count)));
      Tensor got = Tensor::zeros(DType::f32, {count}, Device::cuda(0));
      if (me % 2 == 0) {
        ASSERT_TRUE(p.send(mine, (me + 1) % n).is_ok());
        ASSERT_TRUE(p.recv(got, (me + n - 1) % n).is_ok());
      } else {
        ASSERT_TRUE(p.recv(got, (me + n - 1) % n).is_ok());
        ASSERT_TRUE(p.send(mine, (me + 1) % n).is_ok());
      }
      EXPECT_EQ(got.to_vector<float>(), input_of<float>((me + n - 1) % n, count));
      EXPECT_TRUE(p.barrier().is_ok());
    }
    {  // by data: the root's GPU tensor reaches everyone (as host tensors)
      std::optional<Tensor> data;
      if (me == 2) data = on_gpu(Tensor::from(input_of<int32_t>(9, 17)));
      auto r = p.broadcast(data);
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      EXPECT_EQ(r->to_vector<int32_t>(), input_of<int32_t>(9, 17));
    }
  });
}

template <class T>
void all_reduce_dtype(DType dt) {
  constexpr uint32_t n = 3;
  const std::size_t count = 4099;
  Runtime rt;
  run_peers(rt, config_for(n), [&](Peer& p) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max}) {
      Tensor host = Tensor::zeros(dt, {static_cast<int64_t>(count)});
      auto v = input_of<int32_t>(p.id(), count);
      // Fill through the host reference conversions: f16/bf16 from float, others by cast.
      for (std::size_t k = 0; k < count; ++k) {
        float f = static_cast<float>(v[k]);
        if (dt == DType::f16) host.data_as<uint16_t>()[k] = f32_to_f16(f);
        else if (dt == DType::bf16) host.data_as<uint16_t>()[k] = f32_to_bf16(f);
        else host.data_as<T>()[k] = static_cast<T>(v[k]);
      }
      Tensor d = on_gpu(host);
      ASSERT_TRUE(p.all_reduce(d, op).is_ok()) << to_string(dt) << " " << to_string(op);
      Tensor back = d.to(Device::cpu());
      for (std::size_t k = 0; k < count; ++k) {
        double sum = 0, lo = 1e9, hi = -1e9;
        for (uint32_t j = 0; j < n; ++j) {
          double x = j + 1 + k % 7;
          sum += x;
          lo = std::min(lo, x);
          hi = std::max(hi, x);
        }
        double want = op == ReduceOp::sum ? sum : op == ReduceOp::min ? lo : op == ReduceOp::max ? hi : sum / n;
        if (op == ReduceOp::avg && !is_floating(dt)) want = std::trunc(want);
        double got = dt == DType::f16    ? f16_to_f32(back.data_as<uint16_t>()[k])
                     : dt == DType::bf16 ? bf16_to_f32(back.data_as<uint16_t>()[k])
                                         : static_cast<double>(back.data_as<T>()[k]);
        ASSERT_NEAR(got, want, std::abs(want) * 1e-2) << to_string(dt) << " " << to_string(op) << " element " << k;
      }
    }
  });
}

TEST(DeviceTensorsOnGpu, AllReduceEveryDtype) {
  REQUIRE_GPUS(1);
  all_reduce_dtype<uint16_t>(DType::f16);
  all_reduce_dtype<uint16_t>(DType::bf16);
  all_reduce_dtype<float>(DType::f32);
  all_reduce_dtype<double>(DType::f64);
  all_reduce_dtype<int8_t>(DType::i8);
  all_reduce_dtype<uint8_t>(DType::u8);
  all_reduce_dtype<int32_t>(DType::i32);
  all_reduce_dtype<int64_t>(DType::i64);
}

TEST(DeviceTensorsOnGpu, ManyConsecutiveOpsAndMoreLogicalPeersThanOneKernelTakes) {
  REQUIRE_GPUS(1);
  constexpr uint32_t n = 70;  // more than kMaxFan (64) sources and destinations
  Runtime rt;
  run_peers(rt, config_for(n, "auto", 60000), [&](Peer& p) {
    for (int it = 0; it < 20; ++it) {
      Tensor t = on_gpu(Tensor::from(std::vector<int64_t>(33, static_cast<int64_t>(p.id()) + it)));
      ASSERT_TRUE(p.all_reduce(t, ReduceOp::sum).is_ok());
      int64_t want = static_cast<int64_t>(n) * (n - 1) / 2 + static_cast<int64_t>(n) * it;
      EXPECT_EQ(t.to_vector<int64_t>(), std::vector<int64_t>(33, want)) << it;
    }
    // f16 folds in f32 across all 70 sources: the sum (70035) would overflow f16, the mean does not.
    Tensor h = Tensor::zeros(DType::f16, {9});
    for (int k = 0; k < 9; ++k) h.data_as<uint16_t>()[k] = f32_to_f16(1000.f + static_cast<float>(p.id() % 2));
    Tensor hd = on_gpu(h);
    ASSERT_TRUE(p.all_reduce(hd, ReduceOp::avg).is_ok());
    Tensor back = hd.to(Device::cpu());
    for (int k = 0; k < 9; ++k) EXPECT_EQ(f16_to_f32(back.data_as<uint16_t>()[k]), 1000.5f);
  });
}

// Ops ordered in each peer's own CUDA stream (OpOptions::stream), NCCL's way: per step, the input
// is copied in on the stream, the op is handed in, the result copied out on the stream, and the
// host never waits until the end. Were the op to run before the copy in, or the copy out before
// the op, a step would read another step's numbers.
TEST(DeviceTensorsOnGpu, OpsOrderedInTheCallersStreams) {
  REQUIRE_GPUS(1);
  constexpr uint32_t n = 3;
  constexpr int kSteps = 40;
  constexpr std::size_t kCount = 4096;
  constexpr std::size_t kBytes = kCount * sizeof(float);
  Runtime rt;
  run_peers(rt, config_for(n, "auto", 60000), [&](Peer& p) {
    auto stream = gpu::make_stream(0);
    ASSERT_TRUE(stream.is_ok()) << stream.status().to_string();
    void* pinned = nullptr;  // steps x (in, out), page-locked so the copies stay in the stream
    ASSERT_TRUE(gpu::allocate_pinned(2 * kSteps * kBytes, &pinned).is_ok());
    auto* host = static_cast<float*>(pinned);
    auto in = [&](int s) { return host + (2 * s) * kCount; };
    auto out = [&](int s) { return host + (2 * s + 1) * kCount; };
    for (int s = 0; s < kSteps; ++s)
      for (std::size_t k = 0; k < kCount; ++k) {
        in(s)[k] = static_cast<float>((p.id() + 1) * (s + 1) + k % 5);
        out(s)[k] = -1;
      }
    Tensor t = on_gpu(Tensor::zeros(DType::f32, {static_cast<int64_t>(kCount)}));
    // Every peer allocates before any stream waits for an op: cudaMalloc may wait for the whole
    // GPU, so one during an op another stream waits for would never return (as with NCCL).
    ASSERT_TRUE(p.barrier().is_ok());
    std::vector<Work> works;
    for (int s = 0; s < kSteps; ++s) {
      ASSERT_TRUE(gpu::copy_on_stream(t.data(), in(s), kBytes, *stream).is_ok());
      works.push_back(p.all_reduce_async(t, ReduceOp::sum, OpOptions{.stream = *stream}));
      ASSERT_TRUE(gpu::copy_on_stream(out(s), t.data(), kBytes, *stream).is_ok());
    }
    ASSERT_TRUE(gpu::synchronize_stream(*stream).is_ok());
    for (auto& w : works) EXPECT_TRUE(w.wait().is_ok());
    for (int s = 0; s < kSteps; ++s)
      for (std::size_t k = 0; k < kCount; k += 511)
        ASSERT_EQ(out(s)[k], static_cast<float>(6 * (s + 1) + 3 * (k % 5))) << "step " << s << ", element " << k;
    gpu::release_pinned(pinned);
    gpu::destroy_stream(*stream);
  });
}

// Data-parallel gradient sync on GPU gradients: fused buckets, two contributions per parameter
// summed on the GPU, mean over 3 devices, results copied back into the submitted GPU tensors.
TEST(DeviceTensorsOnGpu, GradientSyncOnGpuGradients) {
  REQUIRE_GPUS(1);
  constexpr uint32_t n = 3;
  const std::vector<ParamSpec> params = {{1, DType::f32, 1000, 2}, {2, DType::f32, 70000, 2}, {3, DType::f32, 5, 2}};
  Runtime rt;
  run_peers(rt, config_for(n), [&](Peer& p) {
    GradSyncOptions o;
    o.device = Device::cuda(0);
    o.bucket_bytes = 64 * 1024;
    GradientSync sync(p, o);
    ASSERT_TRUE(sync.register_params(params).is_ok());
    for (int step = 0; step < 5; ++step) {
      std::vector<Tensor> grads;
      for (auto it = params.rbegin(); it != params.rend(); ++it)  // out of registration order
        for (int c = 0; c < 2; ++c) {
          grads.push_back(on_gpu(Tensor::from(std::vector<float>(it->numel, float(p.id() * 10 + c + step)))));
          ASSERT_TRUE(sync.submit(it->id, grads.back()).is_ok());
        }
      ASSERT_TRUE(sync.sync().is_ok());
      // Each device contributes (10 id + step) + (10 id + 1 + step); the mean over devices:
      const float want = (2.f * 10 * (0 + 1 + 2) + n * (1 + 2 * step)) / n;
      for (auto& g : grads) {
        auto v = g.to_vector<float>();
        for (float x : v) ASSERT_FLOAT_EQ(x, want) << "step " << step;
      }
    }
  });
}

// Peers on distinct GPUs: through NCCL (nccl, auto) and through the on-device plan (peer copies).
TEST(DeviceTensorsOnGpu, PeersOnDistinctGpus) {
  REQUIRE_GPUS(2);
  const uint32_t n = static_cast<uint32_t>(std::min(gpu::device_count(), 4));
  for (const char* strategy : {"nccl", "auto", "direct"}) {
    SCOPED_TRACE(strategy);
    Runtime rt;
    run_peers(rt, config_for(n, strategy, 60000), [&](Peer& p) {  // NCCL setup takes seconds
      const int dev = static_cast<int>(p.id());
      Tensor t = on_gpu(Tensor::from(input_of<int32_t>(p.id(), 257)), dev);
      ASSERT_TRUE(p.all_reduce(t, ReduceOp::avg).is_ok());
      auto r = t.to_vector<int32_t>();
      for (std::size_t k = 0; k < r.size(); ++k) {
        int32_t s = 0;
        for (uint32_t j = 0; j < n; ++j) s += static_cast<int32_t>(j + 1 + k % 7);
        ASSERT_EQ(r[k], s / static_cast<int32_t>(n)) << k;
      }
      Tensor all = Tensor::zeros(DType::i32, {static_cast<int64_t>(n * 257)}, Device::cuda(dev));
      Tensor mine = on_gpu(Tensor::from(input_of<int32_t>(p.id(), 257)), dev);
      ASSERT_TRUE(p.all_gather(mine, all).is_ok());
      auto g = all.to_vector<int32_t>();
      for (uint32_t j = 0; j < n; ++j)
        ASSERT_EQ(std::vector<int32_t>(g.begin() + j * 257, g.begin() + (j + 1) * 257), input_of<int32_t>(j, 257));
      Tensor part = Tensor::zeros(DType::i32, {257}, Device::cuda(dev));
      Tensor big = on_gpu(Tensor::from(input_of<int32_t>(p.id(), n * 257)), dev);
      ASSERT_TRUE(p.all_to_all(big, all).is_ok());
      ASSERT_TRUE(p.scatter(big, part, 1).is_ok());
      auto src = input_of<int32_t>(1, n * 257);
      EXPECT_EQ(part.to_vector<int32_t>(),
                std::vector<int32_t>(src.begin() + p.id() * 257, src.begin() + (p.id() + 1) * 257));
    });
  }
}


} // namespace
