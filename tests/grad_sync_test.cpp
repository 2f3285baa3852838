// GradientSync: fusion buckets, out-of-order submission, sum/mean, local accumulation, collective
// registration checks, submit errors, timeouts and many consecutive steps with verified values.
#include <chorus/grad_sync.hpp>

#include <algorithm>
#include <iostream>
#include <atomic>
#include <random>

#include "peer_harness.hpp"

namespace chorus {
namespace {

using harness::config_for;
using harness::run_peers;

ParamSpec f32(uint64_t id, std::size_t numel, uint32_t c = 1) { return {id, DType::f32, numel, c}; }

// Integer-valued floats so every sum is exact in any order.
float grad_value(uint32_t peer, uint64_t id, std::size_t i, int step = 0) {
  return static_cast<float>((peer + 1) * 10 + id * 3 + (i % 7) + step);
}

Tensor make_grad(uint32_t peer, const ParamSpec& p, int step = 0) {
  std::vector<float> v(p.numel);
  for (std::size_t i = 0; i < p.numel; ++i) v[i] = grad_value(peer, p.id, i, step);
  return Tensor::from(v);
}

float expected_sum(uint32_t n, uint64_t id, std::size_t i, int step = 0) {
  float s = 0;
  for (uint32_t p = 0; p < n; ++p) s += grad_value(p, id, i, step);
  return s;
}

TEST(GradSyncPlan, FusionBoundaries) {
  // 10 f32 = 40 bytes each; threshold 80: two fit exactly, the third opens a new bucket.
  auto b = plan_buckets({f32(1, 10), f32(2, 10), f32(3, 10)}, 80);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].param_ids, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(b[0].offsets, (std::vector<std::size_t>{0, 10}));
  EXPECT_EQ(b[0].bytes(), 80u);
  EXPECT_EQ(b[1].param_ids, (std::vector<uint64_t>{3}));
  // A parameter larger than the threshold gets its own bucket.
  b = plan_buckets({f32(1, 2), f32(2, 100), f32(3, 2), f32(4, 2)}, 64);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].param_ids, (std::vector<uint64_t>{1}));
  EXPECT_EQ(b[1].param_ids, (std::vector<uint64_t>{2}));
  EXPECT_EQ(b[2].param_ids, (std::vector<uint64_t>{3, 4}));
  // A dtype change closes the bucket.
  b = plan_buckets({f32(1, 2), {2, DType::f64, 2, 1}, {3, DType::f64, 2, 1}, f32(4, 2)}, 1 << 20);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[1].dtype, DType::f64);
  EXPECT_EQ(b[1].param_ids, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(b[1].bytes(), 32u);
  // Threshold 0: unfused, one bucket per parameter.
  b = plan_buckets({f32(1, 1), f32(2, 1), f32(3, 1)}, 0);
  EXPECT_EQ(b.size(), 3u);
  // Default threshold: 25 MiB.
  EXPECT_EQ(GradSyncOptions{}.bucket_bytes, 25u << 20);
  b = plan_buckets({f32(1, 4u << 20), f32(2, 2u << 20), f32(3, 1u << 20)}, GradSyncOptions{}.bucket_bytes);
  ASSERT_EQ(b.size(), 2u);  // 16 MiB + 8 MiB = 24 MiB fit; + 4 MiB does not
  EXPECT_EQ(b[0].param_ids.size(), 2u);
}

TEST(GradSync, OutOfOrderSubmissionSum) {
  Runtime rt;
  const uint32_t n = 4;
  auto cfg = config_for(n);
  std::vector<ParamSpec> specs = {f32(0, 5), f32(1, 40), f32(2, 3), f32(3, 100), f32(4, 7), f32(5, 1)};
  run_peers(rt, cfg, [&](Peer& peer) {
    GradSyncOptions o;
    o.bucket_bytes = 64;  // several buckets
    o.op = ReduceOp::sum;
    o.timeout = cfg.timeout;
    GradientSync gs(peer, o);
    ASSERT_TRUE(gs.register_params(specs).is_ok());
    ASSERT_EQ(gs.buckets().size(), plan_buckets(specs, 64).size());
    EXPECT_GE(gs.buckets().size(), 4u);
    std::vector<std::size_t> order(specs.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::mt19937 rng(peer.id() * 7 + 1);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<Tensor> grads(specs.size());
    for (std::size_t i : order) {
      grads[i] = make_grad(peer.id(), specs[i]);
      ASSERT_TRUE(gs.submit(specs[i].id, grads[i]).is_ok());
    }
    Status s = gs.sync();
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    for (std::size_t i = 0; i < specs.size(); ++i) {
      auto v = grads[i].to_vector<float>();
      for (std::size_t j = 0; j < v.size(); ++j)
        ASSERT_EQ(v[j], expected_sum(n, specs[i].id, j)) << "param " << specs[i].id << " elem " << j;
    }
  });
}

TEST(GradSync, MeanVersusSum) {
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
    Runtime rt;
    const uint32_t n = 4;
    auto cfg = config_for(n);
    run_peers(rt, cfg, [&](Peer& peer) {
      GradSyncOptions o;
      o.op = op;
      o.timeout = cfg.timeout;
      GradientSync gs(peer, o);
      ASSERT_TRUE(gs.register_params({f32(10, 8), {11, DType::f64, 3, 1}}).is_ok());
      Tensor a = Tensor::from(std::vector<float>(8, static_cast<float>(peer.id() + 1)));  // 1..4
      Tensor b = Tensor::from(std::vector<double>(3, 2.0 * (peer.id() + 1)));           // 2..8
      ASSERT_TRUE(gs.submit(11, b).is_ok());
      ASSERT_TRUE(gs.submit(10, a).is_ok());
      ASSERT_TRUE(gs.sync().is_ok());
      const float ea = op == ReduceOp::sum ? 10.0f : 2.5f;
      const double eb = op == ReduceOp::sum ? 20.0 : 5.0;
      for (float x : a.to_vector<float>()) EXPECT_EQ(x, ea);
      for (double x : b.to_vector<double>()) EXPECT_EQ(x, eb);
    });
  }
}

TEST(GradSync, ContributionsAreSummedLocally) {
  Runtime rt;
  const uint32_t n = 3;
  auto cfg = config_for(n);
  run_peers(rt, cfg, [&](Peer& peer) {
    GradSyncOptions o;
    o.op = ReduceOp::sum;
    o.timeout = cfg.timeout;
    o.copy_back = false;
    GradientSync gs(peer, o);
    ASSERT_TRUE(gs.register_params({f32(1, 4, 3), {2, DType::i32, 2, 2}}).is_ok());
    for (int c = 0; c < 3; ++c)
      ASSERT_TRUE(gs.submit(1, Tensor::from(std::vector<float>(4, float(c + 1)))).is_ok());
    ASSERT_TRUE(gs.submit(2, Tensor::from(std::vector<int32_t>{1, -1})).is_ok());
    ASSERT_TRUE(gs.submit(2, Tensor::from(std::vector<int32_t>{int32_t(peer.id()), 5})).is_ok());
    ASSERT_TRUE(gs.sync().is_ok());
    auto r1 = gs.reduced(1);
    ASSERT_TRUE(r1.is_ok());
    for (float x : r1->to_vector<float>()) EXPECT_EQ(x, 18.0f);  // (1+2+3) * 3 peers
    auto r2 = gs.reduced(2);
    ASSERT_TRUE(r2.is_ok());
    EXPECT_EQ(r2->to_vector<int32_t>(), (std::vector<int32_t>{3 + 0 + 1 + 2, -3 + 15}));
    EXPECT_FALSE(gs.reduced(99).is_ok());
  });
}

TEST(GradSync, MismatchedRegistrationFailsEverywhere) {
  Runtime rt;
  const uint32_t n = 4;
  auto cfg = config_for(n);
  run_peers(rt, cfg, [&](Peer& peer) {
    GradSyncOptions o;
    o.timeout = cfg.timeout;
    GradientSync gs(peer, o);
    std::vector<ParamSpec> specs = {f32(5, 10), f32(7, 20), f32(9, 30)};
    if (peer.id() == 2) specs[1].numel = 21;
    Status s = gs.register_params(specs);
    EXPECT_EQ(s.code(), Errc::invalid_argument) << s.to_string();
    EXPECT_NE(s.message().find("parameter id 7"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("device 2"), std::string::npos) << s.message();
    // A device with an extra parameter.
    specs = {f32(5, 10), f32(7, 20), f32(9, 30)};
    if (peer.id() == 3) specs.push_back(f32(11, 1));
    s = gs.register_params(specs);
    EXPECT_EQ(s.code(), Errc::invalid_argument) << s.to_string();
    EXPECT_NE(s.message().find("parameter id 11"), std::string::npos) << s.message();
    // A different id in the same place.
    specs = {f32(5, 10), f32(7, 20), f32(9, 30)};
    if (peer.id() == 1) specs[0].id = 6;
    s = gs.register_params(specs);
    EXPECT_EQ(s.code(), Errc::invalid_argument) << s.to_string();
    EXPECT_NE(s.message().find("parameter id 5"), std::string::npos) << s.message();
    // A local error (duplicate id) on one device fails every device.
    specs = {f32(5, 10), f32(7, 20), f32(9, 30)};
    if (peer.id() == 0) specs[2].id = 5;
    s = gs.register_params(specs);
    EXPECT_EQ(s.code(), Errc::invalid_argument) << s.to_string();
    // The same list everywhere then works.
    specs = {f32(5, 10), f32(7, 20), f32(9, 30)};
    s = gs.register_params(specs);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    for (const auto& p : specs) ASSERT_TRUE(gs.submit(p.id, make_grad(peer.id(), p)).is_ok());
    EXPECT_TRUE(gs.sync().is_ok());
  });
}

TEST(GradSync, MismatchedOptionsFailEverywhere) {
  Runtime rt;
  const uint32_t n = 3;
  auto cfg = config_for(n);
  run_peers(rt, cfg, [&](Peer& peer) {
    GradSyncOptions o;
    o.timeout = cfg.timeout;
    if (peer.id() == 1) o.bucket_bytes = 1024;
    GradientSync gs(peer, o);
    Status s = gs.register_params({f32(1, 4)});
    EXPECT_EQ(s.code(), Errc::invalid_argument) << s.to_string();
    EXPECT_NE(s.message().find("device 1 uses bucket_bytes 1024"), std::string::npos) << s.message();
    // Before a successful registration nothing can be submitted or synced.
    EXPECT_EQ(gs.submit(1, Tensor::from(std::vector<float>(4))).code(), Errc::invalid_argument);
    EXPECT_EQ(gs.sync().code(), Errc::invalid_argument);
  });
}

TEST(GradSync, SubmitErrors) {
  Runtime rt;
  const uint32_t n = 2;
  auto cfg = config_for(n);
  run_peers(rt, cfg, [&](Peer& peer) {
    GradSyncOptions o;
    o.op = ReduceOp::sum;
    o.timeout = cfg.timeout;
    GradientSync gs(peer, o);
    EXPECT_EQ(gs.submit(1, Tensor::from(std::vector<float>(4))).code(), Errc::invalid_argument);
    ASSERT_TRUE(gs.register_params({f32(1, 4), f32(2, 4, 2)}).is_ok());
    Status s = gs.submit(42, Tensor::from(std::vector<float>(4)));
    EXPECT_EQ(s.code(), Errc::invalid_argument);
    EXPECT_NE(s.message().find("unknown parameter id 42"), std::string::npos) << s.message();
    EXPECT_EQ(gs.submit(1, Tensor::from(std::vector<double>(4))).code(), Errc::dtype_mismatch);
    EXPECT_EQ(gs.submit(1, Tensor::from(std::vector<float>(5))).code(), Errc::shape_mismatch);
    Tensor g1 = Tensor::from(std::vector<float>(4, 1.0f));
    ASSERT_TRUE(gs.submit(1, g1).is_ok());
    s = gs.submit(1, g1);
    EXPECT_EQ(s.code(), Errc::invalid_argument);
    EXPECT_NE(s.message().find("submitted twice"), std::string::npos) << s.message();
    ASSERT_TRUE(gs.submit(2, Tensor::from(std::vector<float>(4, 1.0f))).is_ok());
    ASSERT_TRUE(gs.submit(2, Tensor::from(std::vector<float>(4, 1.0f))).is_ok());
    EXPECT_EQ(gs.submit(2, g1).code(), Errc::invalid_argument);  // third of 2
    // The rejected submissions changed nothing: the step completes with the right values.
    ASSERT_TRUE(gs.sync().is_ok());
    for (float x : g1.to_vector<float>()) EXPECT_EQ(x, 2.0f);
    for (float x : gs.reduced(2)->to_vector<float>()) EXPECT_EQ(x, 4.0f);
  });
}

TEST(GradSync, TimeoutNamesMissingParameter) {
  Runtime rt;
  const uint32_t n = 3;
  auto cfg = config_for(n, "auto", 250);
  std::vector<Status> results(n);
  run_peers(rt, cfg, [&](Peer& peer) {
    GradSyncOptions o;
    o.bucket_bytes = 0;
    o.timeout = cfg.timeout;
    GradientSync gs(peer, o);
    ASSERT_TRUE(gs.register_params({f32(1, 4), f32(2, 4), f32(3, 4)}).is_ok());
    for (uint64_t id : {1, 2, 3}) {
      if (peer.id() == 1 && id == 2) continue;  // device 1 never submits parameter 2
      ASSERT_TRUE(gs.submit(id, Tensor::from(std::vector<float>(4))).is_ok());
    }
    auto t0 = std::chrono::steady_clock::now();
    results[peer.id()] = gs.sync();
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
    EXPECT_LT(ms.count(), 5000);
  });
  for (uint32_t p = 0; p < n; ++p) {
    EXPECT_EQ(results[p].code(), Errc::timeout) << p << ": " << results[p].to_string();
    std::cout << "device " << p << ": " << results[p].to_string() << "\n";
  }
  EXPECT_NE(results[1].message().find("never submitted parameter(s) 2 "), std::string::npos)
      << results[1].message();
  EXPECT_NE(results[1].message().find("device 1"), std::string::npos) << results[1].message();
  // The other devices' all_reduce (bucket 1 = parameter 2) timed out waiting for peer 1.
  for (uint32_t p : {0u, 2u}) {
    EXPECT_NE(results[p].message().find("parameters 2"), std::string::npos) << results[p].message();
    EXPECT_NE(results[p].message().find("1"), std::string::npos) << results[p].message();
  }
}

TEST(GradSync, FiftyConsecutiveStepsVerified) {
  Runtime rt;
  const uint32_t n = 4;
  auto cfg = config_for(n);
  std::vector<ParamSpec> specs;
  for (uint64_t id = 0; id < 12; ++id) specs.push_back(f32(id * 2 + 1, 1 + id * 37 % 300));
  run_peers(rt, cfg, [&](Peer& peer) {
    GradSyncOptions o;
    o.bucket_bytes = 1024;
    o.op = ReduceOp::avg;
    o.timeout = cfg.timeout;
    GradientSync gs(peer, o);
    ASSERT_TRUE(gs.register_params(specs).is_ok());
    std::mt19937 rng(peer.id() + 100);
    for (int step = 0; step < 50; ++step) {
      std::vector<std::size_t> order(specs.size());
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<Tensor> grads(specs.size());
      for (std::size_t i : order) {
        grads[i] = make_grad(peer.id(), specs[i], step);
        ASSERT_TRUE(gs.submit(specs[i].id, grads[i]).is_ok());
      }
      Status s = gs.sync();
      ASSERT_TRUE(s.is_ok()) << "step " << step << ": " << s.to_string();
      for (std::size_t i = 0; i < specs.size(); ++i) {
        auto v = grads[i].to_vector<float>();
        for (std::size_t j = 0; j < v.size(); ++j)
          ASSERT_EQ(v[j], expected_sum(n, specs[i].id, j, step) / 4.0f) << "step " << step;
      }
    }
  });
}

}  // namespace
}  // namespace chorus
