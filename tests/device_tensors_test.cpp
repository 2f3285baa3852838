// GPU tensors through the public API, where they are wrong: the error cases run everywhere (they
// are decided before any GPU memory is touched). What runs on a GPU is in
// device_tensors_on_gpu_test.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include <chorus/chorus.hpp>
#include <chorus/gpu.hpp>
#include <chorus/grad_sync.hpp>
#include "cuda/gpu.hpp"
#include "peer_harness.hpp"
#include "status_matchers.hpp"

namespace {

using namespace chorus;
using harness::config_for;
using harness::run_peers;

// A device pointer that is never dereferenced: the op fails its checks before touching memory.
void* fake_device_pointer() { return reinterpret_cast<void*>(uintptr_t{0x7f0000001000}); }

TEST(DeviceTensors, MakingATensorOnAMissingGpuIsAClearError) {
  const int missing = gpu::device_count() + 7;
  try {
    Tensor::zeros(DType::f32, {4}, Device::cuda(missing));
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:" + std::to_string(missing)), std::string::npos) << e.what();
  }
  Tensor host = Tensor::from(std::vector<float>{1, 2});
  EXPECT_THROW(host.to(Device::cuda(missing)), std::runtime_error);
  EXPECT_EQ(Device::cuda(3).str(), "cuda:3");
  EXPECT_EQ(Tensor::borrow(fake_device_pointer(), DType::f16, {2, 3}, Device::cuda(1)).describe(), "f16[2, 3] on cuda:1");
}

TEST(DeviceTensors, HostAndGpuTensorsInOneOpFailOnEveryPeer) {
  Runtime rt;
  std::vector<Status> got(3);
  run_peers(rt, config_for(3), [&](Peer& p) {
    Tensor t = p.id() == 1 ? Tensor::borrow(fake_device_pointer(), DType::f32, {8}, Device::cuda(0))
                           : Tensor::zeros(DType::f32, {8});
    got[p.id()] = p.all_reduce(t, ReduceOp::sum);
  });
  for (auto& s : got) {
    EXPECT_EQ(s.code(), Errc::device_mismatch) << s.to_string();
    EXPECT_EQ(s.message(), got[0].message());
  }
  EXPECT_NE(got[0].message().find("peer 1 passes GPU tensors but peer 0 passes host tensors"), std::string::npos)
      << got[0].message();
  // Point to point names the two peers by id: peer 2 sends a GPU tensor to peer 0's host tensor.
  run_peers(rt, config_for(3), [&](Peer& p) {
    if (p.id() == 1) return;
    Tensor t = p.id() == 2 ? Tensor::borrow(fake_device_pointer(), DType::f32, {8}, Device::cuda(0))
                           : Tensor::zeros(DType::f32, {8});
    Status s = p.id() == 2 ? p.send(t, 0) : p.recv(t, 2);
    EXPECT_EQ(s.code(), Errc::device_mismatch) << s.to_string();
    EXPECT_NE(s.message().find("peer 2 passes GPU tensors but peer 0 passes host tensors"), std::string::npos)
        << s.message();
  });
}

TEST(DeviceTensors, InputAndOutputOnDifferentGpusIsAnError) {
  Runtime rt;
  std::vector<Status> got(2);
  run_peers(rt, config_for(2), [&](Peer& p) {
    Tensor in = Tensor::borrow(fake_device_pointer(), DType::f32, {8}, Device::cuda(0));
    Tensor out = Tensor::borrow(fake_device_pointer(), DType::f32, {8}, Device::cuda(p.id()));
    got[p.id()] = p.all_reduce(in, out, ReduceOp::sum);
  });
  for (auto& s : got) {
    EXPECT_EQ(s.code(), Errc::device_mismatch) << s.to_string();
    EXPECT_NE(s.message().find("peer 1 passes its input on cuda:0 and its output on cuda:1"), std::string::npos)
        << s.message();
  }
}

TEST(DeviceTensors, AGpuThatDoesNotExistIsADeviceErrorOnEveryPeer) {
  const int missing = gpu::device_count() + 2;
  Runtime rt;
  std::vector<Status> got(2);
  run_peers(rt, config_for(2), [&](Peer& p) {
    Tensor t = Tensor::borrow(fake_device_pointer(), DType::f32, {8}, Device::cuda(missing));
    got[p.id()] = p.broadcast(t, 0);
  });
  for (auto& s : got) {
    EXPECT_EQ(s.code(), Errc::device_error) << s.to_string();
    EXPECT_NE(s.message().find("cuda:" + std::to_string(missing)), std::string::npos) << s.message();
  }
  // A point-to-point copy is checked the same way.
  run_peers(rt, config_for(2), [&](Peer& p) {
    Tensor t = Tensor::borrow(fake_device_pointer(), DType::f32, {8}, Device::cuda(missing));
    Status s = p.id() == 0 ? p.send(t, 1) : p.recv(t, 0);
    EXPECT_EQ(s.code(), Errc::device_error) << s.to_string();
  });
}

// A GPU tensor that cannot be copied to the host (here: no such GPU) where an op needs host memory
// (by-data broadcast, object collectives): every peer gets the error, and the next op lines up.
TEST(DeviceTensors, AFailedCopyToTheHostFailsTheOpForEveryPeerAndTheNextOpWorks) {
  const int missing = gpu::device_count() + 3;
  Runtime rt;
  run_peers(rt, config_for(3), [&](Peer& p) {
    Tensor bad = Tensor::borrow(fake_device_pointer(), DType::f32, {4}, Device::cuda(missing));
    std::optional<Tensor> data;
    if (p.id() == 1) data = bad;
    auto r = p.broadcast(data);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), Errc::device_error) << r.status().to_string();
    EXPECT_NE(r.status().message().find("peer 1 could not take part"), std::string::npos) << r.status().to_string();
    auto g = p.all_gather_v(p.id() == 2 ? bad : Tensor::from(std::vector<int32_t>{1, 2}));
    ASSERT_FALSE(g.is_ok());
    EXPECT_EQ(g.status().code(), Errc::device_error) << g.status().to_string();
    Tensor t = Tensor::from(std::vector<int32_t>{static_cast<int32_t>(p.id())});
    ASSERT_TRUE(p.all_reduce(t, ReduceOp::sum).is_ok());
    EXPECT_EQ(t.to_vector<int32_t>(), std::vector<int32_t>{3});
  });
}

// "nccl" is a strategy like the others; host tensors under it run as auto would.
TEST(DeviceTensors, NcclStrategyParsesAndHostTensorsRunAsAuto) {
  auto c = parse_strategy("nccl");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(to_string(*c), "nccl");
  Runtime rt;
  run_peers(rt, config_for(3, "nccl"), [&](Peer& p) {
    Tensor t = Tensor::from(std::vector<int32_t>{static_cast<int32_t>(p.id()), 10});
    ASSERT_TRUE(p.all_reduce(t, ReduceOp::sum).is_ok());
    EXPECT_EQ(t.to_vector<int32_t>(), (std::vector<int32_t>{3, 30}));
  });
}

// Gradient sync with GPU gradients: a sync configured for a GPU that is not there fails on every
// device, and a gradient on another device than the sync's is refused.
TEST(DeviceTensors, GradientSyncOnAMissingGpuOrWithAGradientElsewhereIsAnError) {
  const int missing = gpu::device_count() + 1;
  Runtime rt;
  run_peers(rt, config_for(2), [&](Peer& p) {
    GradSyncOptions o;  // device 0 on the host (fine), device 1 on a GPU that is not there
    if (p.id() == 1) o.device = Device::cuda(missing);
    GradientSync sync(p, o);
    Status s = sync.register_params({{7, DType::f32, 16, 1}});
    EXPECT_EQ(s.code(), Errc::device_error) << s.to_string();
    EXPECT_NE(s.message().find("device(s) 1 could not allocate their fusion buffers"), std::string::npos)
        << s.message();
    if (p.id() == 1) {
      EXPECT_NE(s.message().find("cuda:" + std::to_string(missing)), std::string::npos) << s.message();
    }
  });
  Runtime rt2;
  run_peers(rt2, config_for(2), [&](Peer& p) {
    GradientSync host(p);
    ASSERT_TRUE(host.register_params({{7, DType::f32, 16, 1}}).is_ok());
    Status s = host.submit(7, Tensor::borrow(fake_device_pointer(), DType::f32, {16}, Device::cuda(0)));
    EXPECT_EQ(s.code(), Errc::device_mismatch) << s.to_string();
    EXPECT_NE(s.message().find("the sync runs on cpu, the gradient is f32[16] on cuda:0"), std::string::npos)
        << s.message();
  });
}

// The GPU layer itself (cuda/gpu.hpp) answers with a Status: a GPU that is not there (or a build
// without CUDA) is a device_error saying so, after the op's label where there is one.
TEST(DeviceTensors, TheGpuLayerAnswersForAMissingGpuWithADeviceError) {
  const int missing = gpu::device_count() + 4;
  const std::string why = gpu::built_with_cuda() ? "cuda:" + std::to_string(missing) + " does not exist"
                                                 : "chorus was built without CUDA";
  float host[4] = {};
  void* p = host;
  EXPECT_TRUE(has(gpu::allocate(missing, 64, &p), Errc::device_error, {why}));
  EXPECT_EQ(p, nullptr);
  EXPECT_TRUE(has(gpu::copy(fake_device_pointer(), missing, host, gpu::kHost, sizeof host), Errc::device_error, {why}));
  EXPECT_TRUE(has(gpu::memset_zero(missing, fake_device_pointer(), 64), Errc::device_error, {why}));
  EXPECT_TRUE(has(gpu::accumulate(missing, DType::f32, fake_device_pointer(), fake_device_pointer(), 4),
                  Errc::device_error, {why}));
  EXPECT_TRUE(has(gpu::copy_bandwidth(missing, 1 << 20).status(), Errc::device_error, {why}));
  if (gpu::built_with_cuda()) {
    EXPECT_TRUE(has(gpu::copy(host, gpu::kHost, host + 2, gpu::kHost, 8), Errc::invalid_argument,
                    {"neither side is a device"}));
  }
  for (bool nccl : {false, true}) {  // the on-device plan and the NCCL path
    gpu::DeviceCollective c;
    c.kind = OpKind::all_reduce;
    c.count = 4;
    c.label = "all_reduce #7";
    c.use_nccl = nccl;
    for (int d : {missing, missing + 1}) c.peers.push_back({d, fake_device_pointer(), fake_device_pointer()});
    Status s = gpu::run_collective(c, std::chrono::steady_clock::now() + std::chrono::seconds(5));
    EXPECT_TRUE(has(s, Errc::device_error, {why})) << "nccl: " << nccl;
    EXPECT_EQ(s.message().rfind("all_reduce #7: ", 0), 0u) << s.message();
  }
}

} // namespace
