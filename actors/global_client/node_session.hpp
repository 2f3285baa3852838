// The node side of the registration protocol (see actors/orchestrator/orchestrator.hpp): connects to the
// orchestrator with CAF remoting, registers this node, waits (with a deadline) for the topology,
// collects NodeLost notices, and leaves the collective when done.
#pragma once
#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <chorus/result.hpp>
#include "messages/node_codec.hpp"

namespace chorus {

class NodeSession {
 public:
  // Connects to host:port, registers `reg` and waits up to `timeout` for the topology (the
  // orchestrator answers once every expected node is in, or with an error naming the reason).
  // `sys` must be configured with configure_remoting() and outlive the session.
  static Result<std::shared_ptr<NodeSession>> join(caf::actor_system& sys, const std::string& host,
                                                   uint16_t port, const NodeRegisterData& reg,
                                                   std::chrono::milliseconds timeout,
                                                   std::function<void(const NodeLostData&)> on_lost = {});
  ~NodeSession();
  NodeSession(const NodeSession&) = delete;
  NodeSession& operator=(const NodeSession&) = delete;

  const TopologyData& topology() const { return topology_; }
  // NodeLost notices received so far (and the orchestrator's own loss, as node id UINT32_MAX).
  std::vector<NodeLostData> lost() const;
  // Tells the orchestrator this node leaves the collective and stops the node actor. Idempotent.
  void leave();
  // The node's actor (the orchestrator monitors it).
  const caf::actor& actor() const { return node_; }

  struct Shared {
    mutable std::mutex mu;
    std::vector<NodeLostData> lost;
    std::function<void(const NodeLostData&)> on_lost;  // called on the node actor's thread
    void add(NodeLostData d) {
      {
        std::lock_guard<std::mutex> lk(mu);
        lost.push_back(d);
      }
      if (on_lost) on_lost(d);
    }
  };

 private:
  NodeSession() = default;
  caf::actor node_;
  TopologyData topology_;
  std::shared_ptr<Shared> shared_;
  bool left_ = false;
};

} // namespace chorus
