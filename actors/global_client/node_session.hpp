// A node's membership in the orchestrator's collective, for the code that runs the node: connects
// to the orchestrator with CAF remoting, spawns the node actor (node_actor.hpp) in the given actor
// system, joins (waiting, with a deadline, for the topology) and leaves when destroyed.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <chorus/result.hpp>
#include "actors/global_client/node_actor.hpp"

namespace chorus {

// Connects to the orchestrator whose front door is host:port (actors/orchestrator/published.hpp):
// passes the door with `secret` (a wrong one: auth_failed "wrong secret"), then connects CAF (with
// TLS when `sys` uses it) through it, trying again until `give_up` while CAF drops the new
// connection as silent (see node_session.cpp).
Result<orchestrator_actor> connect_orchestrator(caf::actor_system& sys, const std::string& host, uint16_t port,
                                                const std::string& secret,
                                                std::chrono::steady_clock::time_point give_up);

class NodeSession {
 public:
  // How long a newcomer (NodeRegisterData::newcomer) tries to reach the orchestrator.
  static constexpr std::chrono::milliseconds kNewcomerReach{5000};
  // Connects to host:port, registers `reg` and waits up to `timeout` for the topology (the
  // orchestrator answers once every expected node is in, or with an error naming the reason).
  // `sys` must be configured with configure_remoting() and outlive the session. `on_lost` runs on
  // the node actor's thread for every NodeLost notice (and the orchestrator's own loss), and
  // `on_link_lost` for every LinkLost notice. `via`: an orchestrator this process reached already
  // (a session of the collective's previous epoch): the registration goes over that link, with no
  // new door passage or CAF handshake.
  static Result<std::shared_ptr<NodeSession>> join(caf::actor_system& sys, const std::string& host,
                                                   uint16_t port, const NodeRegisterData& reg,
                                                   std::chrono::milliseconds timeout,
                                                   std::function<void(const NodeLostData&)> on_lost = {},
                                                   std::function<void(const LinkLostData&)> on_link_lost = {},
                                                   orchestrator_actor via = {});
  ~NodeSession();
  NodeSession(const NodeSession&) = delete;
  NodeSession& operator=(const NodeSession&) = delete;

  const TopologyData& topology() const { return topology_; }
  // NodeLost notices received so far (and the orchestrator's own loss, as NodeEvents::kOrchestrator;
  // a garbled notice, as NodeEvents::kGarbledNotice).
  std::vector<NodeLostData> lost() const { return events_->lost(); }
  // Tells the orchestrator this node leaves the collective and stops the node actor. Idempotent.
  void leave();
  // The node's actor (the orchestrator monitors it).
  const node_actor& actor() const { return node_; }
  // The orchestrator as this session reached it; null once it is known to be lost or its link
  // garbled a notice (what the node actor heard while it ran: ask before leave()).
  orchestrator_actor orchestrator() const;
  // Tells the orchestrator that this node's data connection broke, through the node actor: from
  // any thread, never blocking, and harmless once the session has left (the report goes nowhere).
  std::function<void(const LinkLostData&)> link_reporter() const;
  // Tells the orchestrator this node revokes `collective` (its node id and ticket prove it); never
  // blocks, harmless once left.
  void revoke(uint64_t collective, uint32_t node, uint64_t ticket) const;
  // An elastic job's newcomers waiting for a grow (NodeEvents::newcomers); waits until there are
  // at least `n`, or `deadline` (false).
  uint32_t newcomers() const { return events_->newcomers.load(); }
  bool wait_newcomers(uint32_t n, Clock::time_point deadline) const;
  // What the node actor answers the orchestrator's status requests with (NodeEvents).
  void set_status_source(std::function<Envelope()> source) { events_->set_status_source(std::move(source)); }

 private:
  NodeSession() = default;
  node_actor node_;
  orchestrator_actor orch_;
  TopologyData topology_;
  std::shared_ptr<NodeEvents> events_;
  bool left_ = false;
};

} // namespace chorus
