#include "actors/global_client/orchestrator_join.hpp"

#include "actors/remoting.hpp"
#include "core/log.hpp"

namespace chorus {

std::optional<std::string> data_plane_loss(const NodeLostData& d) {
  if (d.node_id == NodeEvents::kOrchestrator) return std::nullopt;
  if (d.node_id == NodeEvents::kGarbledNotice || d.node_id == NodeEvents::kLinkNotice ||
      d.node_id == NodeEvents::kRevokeNotice)
    return d.reason;
  return "node " + std::to_string(d.node_id) + " lost: " + d.reason;
}

// `config`'s orchestrator address comes split into host and port; nothing else of it is needed.
Status join_orchestrator(const Config& /*config*/, caf::actor_system& sys, const std::string& host, uint16_t port,
                         const NodeRegisterData& reg, Clock::time_point deadline,
                         std::function<void(uint32_t, const std::string&)> on_node_lost,
                         std::function<void(const LinkLostData&)> on_link_lost, OrchestratorLink& link,
                         orchestrator_actor via) {
  // The orchestrator's front door is reached first (connect_orchestrator, node_session.cpp), within
  // the deadline: an unreachable host fails within our timeout rather than the operating system's.
  auto on_lost = [on_node_lost = std::move(on_node_lost)](const NodeLostData& d) {
    if (d.node_id == NodeEvents::kOrchestrator)  // said at once: nothing else shows it until the job ends
      CHORUS_LOG(warn, net, LogWhere{},
                 d.reason + "; ops go on between the nodes, but a frozen node is now noticed only by op timeouts");
    if (auto why = data_plane_loss(d)) on_node_lost(d.node_id, *why);
  };
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  auto session = NodeSession::join(sys, host, port, reg, std::max(left, std::chrono::milliseconds(1)), on_lost,
                                  std::move(on_link_lost), std::move(via));
  if (!session.is_ok()) return session.status();
  link.session = std::move(*session);
  return Status::ok();
}

void OrchestratorLink::leave() {
  if (session) session->leave();
  session.reset();
}

} // namespace chorus
