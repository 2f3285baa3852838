// Two nodes as two Runtimes of this process, joined through the orchestrator daemon, for the
// suites that look inside both nodes' global clients (node_loss_test, p2p_window_test).
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <chorus/runtime.hpp>
#include "actors/global_client/global_client.hpp"
#include "runtime/runtime_impl.hpp"
#include "transport/connection.hpp"
#include "testkit/process.hpp"

namespace chorus {

// The config of one of `nodes` nodes that are Runtimes of this process, with `peers` peers,
// joined through the daemon `orch` (20 s timeouts).
inline Config in_process_node(const testkit::Orchestrator& orch, uint32_t peers, uint32_t nodes) {
  Config cfg;
  cfg.num_devices = peers;
  cfg.num_nodes = nodes;
  cfg.orchestrator_address = "127.0.0.1:" + std::to_string(orch.port);
  cfg.node_address = "127.0.0.1";
  cfg.timeout = std::chrono::seconds(20);
  return cfg;
}

// Two nodes as two Runtimes of this process, joined through the daemon: node 0's runtime has
// peers A and B, node 1's one peer, C (20 s timeouts). Node ids go by the order of joining:
// either runtime may be node 0.
struct TwoNodes {
  testkit::Orchestrator orch = testkit::start_orchestrator({"--port", "0", "--nodes", "2", "--heartbeat-ms", "500"});
  testkit::ChildGuard daemon{orch.pid};
  Runtime nodes[2];
  Result<Peer> a = Status(Errc::internal, "not registered"), b = a, c = a;

  Config config(uint32_t peers) const { return in_process_node(orch, peers, 2); }
  ::testing::AssertionResult join() {
    if (orch.pid <= 0) return ::testing::AssertionFailure() << orch.error;
    // Registration blocks until both nodes joined: one thread per node.
    std::thread other([&] { c = nodes[1].register_peer(0, config(1)); });
    std::thread mate([&] { b = nodes[0].register_peer(1, config(2)); });
    a = nodes[0].register_peer(0, config(2));
    mate.join();
    other.join();
    if (a.is_ok() && b.is_ok() && c.is_ok()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << a.status().to_string() << " / " << b.status().to_string() << " / "
                                         << c.status().to_string();
  }
  GlobalClient& here() { return *RuntimeAccess::impl(nodes[0]).global; }
  GlobalClient& there() { return *RuntimeAccess::impl(nodes[1]).global; }
  std::string lost() { return "node " + std::to_string(there().node_id()) + " lost"; }
  // An end of stream without a bye, not a reset (as a killed process's kernel would).
  void cut() { there().connection(here().node_id())->kill(); }
  // A point-to-point frame from node 0 to node 1 that node 0's global client did not make (the
  // hostile cases): `head` (its control message, `slot` bytes) and `bytes` of `data` after it, for
  // the pair src -> dst.
  std::shared_ptr<SendTicket> forge(FrameType type, uint32_t src, uint32_t dst, std::string head,
                                    const void* data = nullptr, std::size_t bytes = 0) {
    FrameHeader h = here().frame_header(type);
    h.slot = static_cast<uint32_t>(head.size());
    h.seq = (uint64_t{src} << 32) | dst;
    return here().connection(there().node_id())
        ->send(SendTicket::prefixed(h, std::move(head), static_cast<const std::byte*>(data), bytes));
  }
  // The data frame (p2p_body) of node 0's message `id`: `bytes` of `data`.
  std::shared_ptr<SendTicket> forge_body(uint64_t id, const void* data, std::size_t bytes) {
    FrameHeader h = here().frame_header(FrameType::p2p_body);
    h.seq = id;
    h.bytes = bytes;
    return here().connection(there().node_id())->send(SendTicket::of(h, static_cast<const std::byte*>(data)));
  }
};

} // namespace chorus
