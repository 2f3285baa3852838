// Node runtimes of this process joined into one job through an orchestrator daemon: three nodes
// of two peers, on one host (so they share the host's arena). For the tests that run every node
// against one test double in this process (NCCL's, CUDA IPC's). A fixture holds it after its
// doubles, so that the runtimes go before the doubles they use.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <chorus/runtime.hpp>
#include "testkit/process.hpp"

namespace chorus::testing_support {

struct NodeRuntimes {
  static constexpr int kNodes = 3, kPeers = 2, kRanks = kNodes * kPeers;

  // Starts the daemon and registers every peer, each from a thread of its own, with `c` (the
  // job's fields filled in here). `on_thread(node)` runs on each registering thread first and
  // returns what must live while it registers (a thread-local double, say), or null.
  ::testing::AssertionResult start(Config c, const std::function<std::shared_ptr<void>(int node)>& on_thread = {}) {
    orch = testkit::start_orchestrator({"--port", "0", "--nodes", std::to_string(kNodes)});
    if (orch.pid <= 0) return ::testing::AssertionFailure() << orch.error;
    daemon.pid = orch.pid;
    c.num_devices = kPeers;
    c.num_nodes = kNodes;
    c.orchestrator_address = "127.0.0.1:" + std::to_string(orch.port);
    c.node_address = "127.0.0.1";
    std::vector<std::thread> joining;
    peers.assign(kRanks, Status(Errc::internal, "not registered"));
    for (int n = 0; n < kNodes; ++n)
      for (int p = 0; p < kPeers; ++p)
        joining.emplace_back([&, n, p] {
          auto held = on_thread ? on_thread(n) : nullptr;
          peers[n * kPeers + p] = nodes[n].register_peer(p, c);
        });
    for (auto& t : joining) t.join();
    for (auto& p : peers)
      if (!p.is_ok()) return ::testing::AssertionFailure() << p.status().to_string();
    return ::testing::AssertionSuccess();
  }
  ~NodeRuntimes() {
    for (auto& p : peers)
      if (p.is_ok()) (void)p->finish();
  }

  // Every peer runs `call` on a thread of its own (with its global rank); the statuses by rank.
  std::vector<Status> everyone(const std::function<Status(Peer&, int rank)>& call) {
    std::vector<Status> out(kRanks);
    std::vector<std::thread> threads;
    for (int i = 0; i < kRanks; ++i)
      threads.emplace_back([&, i] {
        Peer& p = *peers[i];
        out[p.rank()] = call(p, static_cast<int>(p.rank()));
      });
    for (auto& t : threads) t.join();
    return out;
  }

  testkit::Orchestrator orch;
  testkit::ChildGuard daemon{-1};
  Runtime nodes[kNodes];
  std::vector<Result<Peer>> peers;
};

} // namespace chorus::testing_support
