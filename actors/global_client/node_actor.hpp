// The global client's control side: one actor per node process. It joins the orchestrator's
// collective for the node (one register request, bounded by the join's deadline), then holds the
// membership: it monitors the orchestrator, takes its NodeLost notices and leaves when the node is
// done. Every outcome of a join is a NodeRegisterReply: the orchestrator's (passed on as it is), or
// one the node actor writes itself, naming the orchestrator's address, when no answer came in time,
// the request failed or the orchestrator was lost first.
//
// Messages (payloads are chorus::Envelope, messages/chorus.capnp):
//   runtime -> node  request (join_atom, NodeRegister, deadline) => NodeRegisterReply
//   runtime -> node  (node_leave_atom, NodeLeave)   tell the orchestrator, then stop
//   orch -> node     (node_lost_atom, NodeLost)     a member node died, froze or left uncleanly
//                                                   (garbled: NodeEvents::kGarbledNotice)
//   runtime -> node  (link_report_atom, LinkLost)   this node's data connection broke: passed on
//   node -> orch     (link_lost_atom, LinkLost)     to the orchestrator
//   orch -> node     (link_lost_atom, LinkLost)     another member's connection broke
//                                                   (NodeEvents::add_link; garbled: as above)
//   orch -> node     request (status_atom, {})      => NodeStatus (NodeEvents::status)
//   runtime -> node  (revoke_atom, collective, node, ticket)  Peer::revoke: passed on to the orchestrator
//   orch -> node     (revoke_atom, collective, by)  another member revoked the collective
//                                                   (NodeEvents::kRevokeNotice)
//   orch -> node     (newcomers_atom, collective, n) an elastic job's newcomers waiting for a grow
//                                                   (two integers: nothing to decode)
#pragma once
#include <caf/all.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/atoms.hpp"
#include "actors/orchestrator/orchestrator.hpp"
#include "core/wait.hpp"
#include "messages/envelope.hpp"
#include "messages/link_codec.hpp"
#include "messages/node_codec.hpp"

namespace chorus {

using join_atom = caf::atom_constant<caf::atom("join")>;

using node_actor = node_notice_actor::extend<caf::replies_to<join_atom, Envelope, caf::timespan>::with<Envelope>,
                                             caf::reacts_to<node_leave_atom, Envelope>,
                                             caf::reacts_to<link_report_atom, Envelope>,
                                             caf::reacts_to<revoke_atom, uint64_t, uint32_t, uint64_t>>;

// What the node actor learns, for whoever runs the node's data plane. add() runs on the node
// actor's thread: the callback must be short and take no lock that a waiting peer holds.
struct NodeEvents {
  // The orchestrator's own loss is reported as node id kOrchestrator.
  static constexpr uint32_t kOrchestrator = UINT32_MAX;
  // A NodeLost notice that could not be decoded, as node id kGarbledNotice. The orchestrator sends
  // one only when a member node was lost, so some node may be lost (which one is unknown), and a
  // link that garbles messages is not trusted: it counts as the orchestrator's loss too (a join
  // still waiting fails).
  static constexpr uint32_t kGarbledNotice = UINT32_MAX - 1;
  // A LinkLost notice (another member's data connection broke), as node id kLinkNotice with the
  // whole message (link_lost_message) as its reason.
  static constexpr uint32_t kLinkNotice = UINT32_MAX - 2;
  // Another member revoked the collective (Peer::revoke), as node id kRevokeNotice with the
  // sentence every op then reports as its reason.
  static constexpr uint32_t kRevokeNotice = UINT32_MAX - 3;
  std::function<void(const NodeLostData&)> on_lost;
  std::function<void(const LinkLostData&)> on_link_lost;
  void add(NodeLostData d);
  void add_link(const LinkLostData& l);
  std::vector<NodeLostData> lost() const;
  // Where the node's peers stand, for the orchestrator's status requests: set once the node runs
  // ops. It runs on the node actor's thread, so it must be short and wait for nothing (it reads
  // the flight recorder and takes the local server's and the ops' locks briefly, one at a time).
  void set_status_source(std::function<Envelope()> source);
  // The source's answer (a NodeStatus), or one saying the node is not running ops yet.
  Envelope status() const;
  // An elastic job's newcomers waiting for a grow, as the orchestrator last told (it tells every
  // member when one comes or goes, and after each grow), and a word that rises with each notice.
  std::atomic<uint32_t> newcomers{0};
  WaitWord newcomer_notices;

 private:
  mutable std::mutex mu_;
  std::vector<NodeLostData> lost_;
  std::function<Envelope()> status_;
};

// What every op of a revoked collective reports: "collective C was revoked by node K".
std::string revoked_message(uint64_t collective, uint32_t by);

// `where`: the orchestrator's host:port, named in every failure the node actor writes itself.
node_actor::behavior_type node_actor_impl(node_actor::pointer self, orchestrator_actor orch, std::string where,
                                          std::shared_ptr<NodeEvents> events);

// What a failed request on the way to the orchestrator at `where` (host:port) means for a join:
// no answer within `waited` is a timeout, a lost or unreachable link is unreachable, anything else
// internal. `rendered` is the error as the actor system renders it.
Status join_error(const caf::error& err, const std::string& where, caf::timespan waited, const std::string& rendered);

} // namespace chorus
