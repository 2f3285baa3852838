// How the global client joins the orchestrator: a second actor system that speaks CAF remoting to
// it, and the node session (node_session.hpp) that registers this node, receives the topology and
// relays NodeLost notices. (Another step of issue 12 makes this an actor in the Runtime's own
// system; until then it is kept as it was, only moved here.)
#pragma once
#include <caf/all.hpp>

#include <functional>
#include <memory>
#include <string>

#include <chorus/config.hpp>
#include "actors/global_client/node_session.hpp"
#include "core/wait.hpp"
#include "messages/node_codec.hpp"

namespace chorus {

struct OrchestratorLink {
  std::unique_ptr<caf::actor_system_config> cfg;
  std::unique_ptr<caf::actor_system> system;
  std::shared_ptr<NodeSession> session;  // declared last: goes before the system it lives in

  // Tells the orchestrator this node leaves, then stops the actor system. Idempotent.
  void leave();
};

// Registers `reg` with the orchestrator at config.orchestrator_address (host:port, already split
// into `host` and `port`) before the deadline and fills `link`. on_node_lost(node, why): a NodeLost
// notice for another node (the orchestrator's own loss is not one), on an actor's thread.
Status join_orchestrator(const Config& config, const std::string& host, uint16_t port, const NodeRegisterData& reg,
                         Clock::time_point deadline, std::function<void(uint32_t, const std::string&)> on_node_lost,
                         OrchestratorLink& link);

} // namespace chorus
