// GPU tensors of the logical peers of one process meeting in the process's arena
// (runtime/peer/gpu_arena_path.hpp), end to end from the public API on a machine without a GPU:
// CUDA's calls played by the double of tests/fake_ipc.hpp (the lead's plan runs on host memory),
// the GPU tensors borrowed host memory tagged with a CUDA device. Checked: every op kind runs once,
// by its lead, over every peer's buffers as they are (nothing exported or opened), with the
// reference result; a mismatch, host tensors or peers on different GPUs take the ordinary path
// and its errors; a failure in the lead is every peer's error, word for word, and the next op runs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <chorus/chorus.hpp>
#include "fake_ipc.hpp"
#include "fake_nccl.hpp"
#include "peer_harness.hpp"

namespace chorus {
namespace {

using harness::config_for;
using harness::run_peers;

constexpr uint32_t kN = 4;

Tensor on_gpu(std::vector<float>& v, int device = 0) {
  return Tensor::borrow(v.data(), DType::f32, {static_cast<int64_t>(v.size())}, Device::cuda(device));
}

class GpuLocalArena : public ::testing::Test {
 protected:
  virtual int gpu_of(int) const { return 0; }
  // Runs `call` on every peer of a fresh world; their statuses by rank.
  std::vector<Status> everyone(const std::function<Status(Peer&, int)>& call) {
    std::vector<Status> st(kN);
    run_peers(rt_, config_for(kN), [&](Peer& p) { st[p.id()] = call(p, static_cast<int>(p.id())); });
    return st;
  }
  fake::FakeIpc ipc_{[this](int d) { return gpu_of(d); }};
  fake::IpcDoubleInPlace in_place_{&ipc_};
  fake::HostMemoryAsGpus memory_;
  Runtime rt_;
};

TEST_F(GpuLocalArena, EveryOpKindRunsOnceByItsLeadWithTheReferenceResult) {
  const int c = 3;  // elements a rank's block
  std::vector<std::vector<float>> in(kN), out(kN);
  std::vector<std::string> strategy(kN);
  auto fill = [&](int r, int in_n, int out_n) {
    in[r].assign(in_n, 0.0f);
    for (int i = 0; i < in_n; ++i) in[r][i] = static_cast<float>(10 * r + i);
    out[r].assign(out_n, -1.0f);
  };
  auto ok = [&](const std::vector<Status>& st) {
    for (uint32_t r = 0; r < kN; ++r) ASSERT_TRUE(st[r].is_ok()) << "rank " << r << ": " << st[r].to_string();
  };
  int ops = 0;
  auto run = [&](const std::function<Status(Peer&, int)>& f) {
    ++ops;
    return everyone([&](Peer& p, int r) {
      Status s = f(p, r);
      strategy[r] = p.last_strategy();
      return s;
    });
  };
  // all_reduce out of place: every output the sum of every input.
  ok(run([&](Peer& p, int r) {
    fill(r, c, c);
    Tensor x = on_gpu(in[r]), y = on_gpu(out[r]);
    return p.all_reduce(x, y, ReduceOp::sum);
  }));
  for (uint32_t r = 0; r < kN; ++r) {
    EXPECT_EQ(out[r], (std::vector<float>{60, 64, 68})) << r;
    EXPECT_EQ(strategy[r], "device") << r;
  }
  // reduce to root 2, avg.
  ok(run([&](Peer& p, int r) {
    fill(r, c, c);
    Tensor x = on_gpu(in[r]), y = on_gpu(out[r]);
    return p.reduce(x, y, ReduceOp::avg, 2);
  }));
  for (uint32_t r = 0; r < kN; ++r)
    EXPECT_EQ(out[r], (r == 2 ? std::vector<float>{15, 16, 17} : std::vector<float>(c, -1.0f))) << r;
  // broadcast from 1, in place.
  ok(run([&](Peer& p, int r) {
    fill(r, c, 0);
    Tensor x = on_gpu(in[r]);
    return p.broadcast(x, 1);
  }));
  for (uint32_t r = 0; r < kN; ++r) EXPECT_EQ(in[r], (std::vector<float>{10, 11, 12})) << r;
  // all_gather.
  ok(run([&](Peer& p, int r) {
    fill(r, c, c * kN);
    Tensor x = on_gpu(in[r]), y = on_gpu(out[r]);
    return p.all_gather(x, y);
  }));
  for (uint32_t r = 0; r < kN; ++r)
    for (uint32_t k = 0; k < kN; ++k)
      for (int i = 0; i < c; ++i) EXPECT_EQ(out[r][k * c + i], 10.0f * k + i) << r << " from " << k;
  // reduce_scatter: block r of every input, summed, into rank r's output.
  ok(run([&](Peer& p, int r) {
    fill(r, c * kN, c);
    Tensor x = on_gpu(in[r]), y = on_gpu(out[r]);
    return p.reduce_scatter(x, y, ReduceOp::sum);
  }));
  for (uint32_t r = 0; r < kN; ++r)
    for (int i = 0; i < c; ++i) EXPECT_EQ(out[r][i], 60.0f + 4 * (r * c + i)) << r << " " << i;
  // all_to_all: rank r's block k goes to rank k's block r.
  ok(run([&](Peer& p, int r) {
    fill(r, c * kN, c * kN);
    Tensor x = on_gpu(in[r]), y = on_gpu(out[r]);
    return p.all_to_all(x, y);
  }));
  for (uint32_t r = 0; r < kN; ++r)
    for (uint32_t k = 0; k < kN; ++k)
      for (int i = 0; i < c; ++i) EXPECT_EQ(out[r][k * c + i], 10.0f * k + r * c + i) << r << " from " << k;
  // gather to 3, then scatter from 0.
  ok(run([&](Peer& p, int r) {
    fill(r, c, c * kN);
    Tensor x = on_gpu(in[r]), y = on_gpu(out[r]), none;
    return p.gather(x, r == 3 ? y : none, 3);
  }));
  for (uint32_t k = 0; k < kN; ++k)
    for (int i = 0; i < c; ++i) EXPECT_EQ(out[3][k * c + i], 10.0f * k + i) << k;
  ok(run([&](Peer& p, int r) {
    fill(r, c * kN, c);
    Tensor x = on_gpu(in[r]), y = on_gpu(out[r]), none;
    return p.scatter(r == 0 ? x : none, y, 0);
  }));
  for (uint32_t r = 0; r < kN; ++r)
    for (int i = 0; i < c; ++i) EXPECT_EQ(out[r][i], static_cast<float>(r * c + i)) << r;
  // Each op ran once, by its lead, over every rank's buffers; one process needs no handles.
  EXPECT_EQ(ipc_.runs(), ops);
  EXPECT_EQ(ipc_.buffers_in_last_run(), static_cast<int>(kN) + 1);  // the scatter: the root's input, every output
  EXPECT_EQ(ipc_.exports(), 0);
  EXPECT_EQ(ipc_.opens(), 0);
  EXPECT_EQ(memory_.copies(), 0u);  // nothing staged
}

// What the arena does not take goes the ordinary way (the local server) with its errors, word for
// word on every peer: a shape that differs; host and GPU tensors in one op. The lead runs nothing.
TEST_F(GpuLocalArena, WhatTheArenaDoesNotTakeGetsTheOrdinaryPathsError) {
  std::vector<std::vector<float>> data(kN);
  auto st = everyone([&](Peer& p, int r) {
    data[r].assign(r == 3 ? 6 : 5, 1.0f);
    Tensor x = on_gpu(data[r]);
    return p.all_reduce(x, ReduceOp::sum);
  });
  for (uint32_t r = 0; r < kN; ++r) {
    EXPECT_EQ(st[r].code(), Errc::shape_mismatch) << r << ": " << st[r].to_string();
    EXPECT_EQ(st[r], st[0]) << r;
  }
  st = everyone([&](Peer& p, int r) {
    data[r].assign(5, 1.0f);
    Tensor x = r == 1 ? Tensor::borrow(data[r].data(), DType::f32, {5}) : on_gpu(data[r]);
    return p.all_reduce(x, ReduceOp::sum);
  });
  for (uint32_t r = 0; r < kN; ++r) {
    EXPECT_EQ(st[r].code(), Errc::device_mismatch) << r << ": " << st[r].to_string();
    EXPECT_EQ(st[r], st[0]) << r;
  }
  EXPECT_NE(st[0].message().find("passes host tensors"), std::string::npos) << st[0].to_string();
  EXPECT_EQ(ipc_.runs(), 0);
}

// A failure in the lead (a CUDA error there) is every peer's, word for word; the next op runs.
TEST_F(GpuLocalArena, TheLeadsFailureIsEveryPeersErrorAndTheNextOpRuns) {
  std::vector<std::vector<float>> data(kN);
  auto sum = [&](Peer& p, int r) {
    data[r].assign(4, static_cast<float>(r));
    Tensor x = on_gpu(data[r]);
    return p.all_reduce(x, ReduceOp::sum);
  };
  ipc_.fail_runs_with({Errc::device_error, "fake: an illegal memory access was encountered"});
  auto st = everyone(sum);
  for (uint32_t r = 0; r < kN; ++r) {
    EXPECT_EQ(st[r].code(), Errc::device_error) << r << ": " << st[r].to_string();
    EXPECT_EQ(st[r], st[0]) << r;
  }
  EXPECT_EQ(st[0].message(), "all_reduce #0: fake: an illegal memory access was encountered");
  ipc_.fail_runs_with(Status::ok());
  st = everyone(sum);
  for (uint32_t r = 0; r < kN; ++r) {
    ASSERT_TRUE(st[r].is_ok()) << r << ": " << st[r].to_string();
    EXPECT_EQ(data[r], std::vector<float>(4, 6.0f)) << r;
  }
  EXPECT_EQ(ipc_.runs(), 1);  // the double counts the runs that ended well
}

// Peers on GPUs of their own are not the arena's: the ordinary path (NCCL where there are such
// GPUs; here there are none, and every peer hears so alike).
class GpuLocalArenaDistinctGpus : public GpuLocalArena {
 protected:
  int gpu_of(int d) const override { return d; }
};

TEST_F(GpuLocalArenaDistinctGpus, PeersOnDifferentGpusTakeTheOrdinaryPath) {
  std::vector<std::vector<float>> data(kN);
  auto st = everyone([&](Peer& p, int r) {
    data[r].assign(4, 1.0f);
    Tensor x = on_gpu(data[r], r);
    return p.all_reduce(x, ReduceOp::sum);
  });
  for (uint32_t r = 0; r < kN; ++r) {
    EXPECT_EQ(st[r].code(), Errc::device_error) << r << ": " << st[r].to_string();
    EXPECT_EQ(st[r], st[0]) << r;
  }
  EXPECT_EQ(ipc_.runs(), 0);
}

} // namespace
} // namespace chorus
