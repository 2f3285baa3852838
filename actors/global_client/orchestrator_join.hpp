// How the global client joins the orchestrator: the node session (node_session.hpp) registers this
// node from a node actor in the runtime's own actor system (one per process), receives the
// topology and relays NodeLost notices.
#pragma once
#include <caf/all.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <chorus/config.hpp>
#include "actors/global_client/node_session.hpp"
#include "core/wait.hpp"
#include "messages/node_codec.hpp"

namespace chorus {

struct OrchestratorLink {
  std::shared_ptr<NodeSession> session;

  // Tells the orchestrator this node leaves (its node actor then stops). Idempotent.
  void leave();
};

// Registers `reg` with the orchestrator at config.orchestrator_address (host:port, already split
// into `host` and `port`) before the deadline, from a node actor spawned in `sys` (configured for
// remoting: actors/remoting.hpp), and fills `link`. on_node_lost(node, why): what the data plane
// hears of the node actor's events (data_plane_loss), on the node actor's thread; on_link_lost:
// the LinkLost notices, there too. `via`: a link to that orchestrator this process holds already
// (the previous epoch's: NodeSession::join).
// What the data plane hears of one of the node actor's events: a member node's loss ("node K lost:
// ..."), or a garbled notice (its reason: some node may be lost, so every op in flight fails rather
// than wait out its timeout); nullopt for the orchestrator's own loss, which ops between the nodes
// survive.
std::optional<std::string> data_plane_loss(const NodeLostData& d);

Status join_orchestrator(const Config& config, caf::actor_system& sys, const std::string& host, uint16_t port,
                         const NodeRegisterData& reg, Clock::time_point deadline,
                         std::function<void(uint32_t, const std::string&)> on_node_lost,
                         std::function<void(const LinkLostData&)> on_link_lost, OrchestratorLink& link,
                         orchestrator_actor via = {});

} // namespace chorus
