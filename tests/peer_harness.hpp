// Test harness: registers peers 0..n-1 on one Runtime and runs a function on each in its own
// thread, like a host app's device threads would.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <thread>
#include <vector>

#include <chorus/chorus.hpp>

namespace chorus::harness {

inline Config config_for(uint32_t n, const char* strategy = "auto", int timeout_ms = 10000) {
  Config c;
  c.num_devices = n;
  c.with_local_strategy(*parse_strategy(strategy));
  c.timeout = std::chrono::milliseconds(timeout_ms);
  return c;
}

// Registers every peer (from its own thread), runs fn(peer), then finishes every peer.
inline void run_peers(Runtime& rt, const Config& cfg, const std::function<void(Peer&)>& fn) {
  std::vector<std::thread> threads;
  for (uint32_t p = 0; p < cfg.num_devices; ++p)
    threads.emplace_back([&, p] {
      auto peer = rt.register_peer(p, cfg);
      ASSERT_TRUE(peer.is_ok()) << peer.status().to_string();
      fn(*peer);
      EXPECT_TRUE(peer->finish().is_ok());
    });
  for (auto& t : threads) t.join();
}

} // namespace chorus::harness
