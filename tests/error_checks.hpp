// What the error-path tests share: small tensors, a correct all_reduce that checks its values
// (the op after an error must work normally), and running an op that fails on every peer alike.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include <chorus/chorus.hpp>
#include "peer_harness.hpp"
#include "status_matchers.hpp"

namespace chorus::testing {

using harness::config_for;
using harness::run_peers;

inline Tensor f32(std::vector<float> v) { return Tensor::from(v); }
inline Tensor f32_zeros(int64_t n) { return Tensor::zeros(DType::f32, {n}); }

// A correct all_reduce (sum) on this peer; checks the values it gets back.
inline void correct_all_reduce(Peer& p) {
  const float me = static_cast<float>(p.id() + 1);
  Tensor t = f32({me, 2 * me, -me});
  Status s = p.all_reduce(t, ReduceOp::sum);
  ASSERT_TRUE(s.is_ok()) << "peer " << p.id() << ": the op after the error failed: " << s.to_string();
  const float n = static_cast<float>(p.size());
  const float sum = n * (n + 1) / 2;
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{sum, 2 * sum, -sum})) << "peer " << p.id();
}

// Runs `fn` on every peer of a fresh n-peer collective, then a correct all_reduce on every peer.
// Every peer must have got the same error, with `code` and every one of `parts` in its message.
inline void expect_shared_error(uint32_t n, const std::function<Status(Peer&)>& fn, Errc code,
                         std::initializer_list<std::string> parts, int timeout_ms = 10000) {
  Runtime rt;
  std::vector<Status> got(n);
  run_peers(rt, config_for(n, "auto", timeout_ms), [&](Peer& p) {
    got[p.id()] = fn(p);
    correct_all_reduce(p);
  });
  EXPECT_TRUE(has(got[0], code, parts));
  for (uint32_t p = 0; p < n; ++p) EXPECT_EQ(got[p], got[0]) << "peer " << p << ": " << got[p].to_string();
}

} // namespace chorus::testing
