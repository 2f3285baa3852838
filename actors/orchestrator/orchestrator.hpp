// The orchestrator actor: the shell around OrchestratorCore (orchestrator_core.hpp) that takes its
// messages, monitors the nodes and runs its timers. Its interface is typed (orchestrator_actor):
// a node built against another interface cannot connect (remote_actor<orchestrator_actor> checks
// it), and nothing else reaches the actor.
//
// Protocol (messages/chorus.capnp, every payload a chorus::Envelope):
//   node -> orch  request (register_atom, NodeRegister)  => NodeRegisterReply (delayed until the
//                 collective is complete; an error reply at once on rejection)
//   node -> orch  (node_leave_atom, NodeLeave)           one-way: the node leaves the collective
//   orch -> node  (node_lost_atom, NodeLost)             a node of the complete collective was lost
//   node -> orch  (link_lost_atom, LinkLost)             one-way: the sender's data connection to
//                 another member broke (a member's report of its own collective only)
//   orch -> node  (link_lost_atom, LinkLost)             the collective's first broken connection,
//                 to every member but its reporter
//   anyone -> orch request (get_atom) => (uint64 collective, uint64 registered, bool complete)
//   ctl -> orch   request (status_atom, StatusRequest)   => JobStatus: every member node's answer to
//                 the same request below (within kStatusWait; silent nodes named), or a refusal
//                 (a garbled request; the secret was the front door's to check)
//   orch -> node  request (status_atom, {})              => NodeStatus: where the node's peers stand
//   orch -> orch  (timeout_atom, timer id)               its own admission timer; ignored from others
//   exit messages from other processes are dropped (orchestrator_self)
#pragma once
#include <caf/io/all.hpp>

#include "actors/atoms.hpp"
#include "actors/orchestrator/orchestrator_core.hpp"
#include "actors/remoting.hpp"
#include "messages/envelope.hpp"

namespace chorus {

using orchestrator_actor = caf::typed_actor<
    caf::replies_to<register_atom, Envelope>::with<Envelope>,
    caf::reacts_to<node_leave_atom, Envelope>,
    caf::reacts_to<link_lost_atom, Envelope>,
    caf::reacts_to<revoke_atom, uint64_t, uint32_t, uint64_t>,  // collective, node id, its ticket
    caf::replies_to<caf::get_atom>::with<uint64_t, uint64_t, bool>,
    caf::replies_to<status_atom, Envelope>::with<Envelope>,
    caf::reacts_to<timeout_atom, uint64_t>>;

// What the orchestrator sends to a node: the node's side of the protocol (a node's actor may
// offer more, see actors/global_client/).
using node_notice_actor = caf::typed_actor<caf::reacts_to<node_lost_atom, Envelope>,
                                           caf::reacts_to<link_lost_atom, Envelope>,
                                           caf::reacts_to<newcomers_atom, uint64_t, uint32_t>,
                                           caf::reacts_to<revoke_atom, uint64_t, uint32_t>,  // collective, by node
                                           caf::replies_to<status_atom, Envelope>::with<Envelope>>;

// How long the orchestrator waits for each node's answer to a status request: a node that is
// frozen or busy past it is named as silent, so the report comes even when a node does not.
inline constexpr std::chrono::milliseconds kStatusWait{2000};

// The orchestrator's actor class: it takes exit messages only from caf::anon_send_exit called by
// this process's own threads, and drops every other before CAF looks at it (a remote one above
// all: whatever sender or source it claims, BASP delivers it from one of its execution units).
// An exit handler would not do: CAF ends an actor on exit_reason::kill without asking it, and a
// dead orchestrator fails every later node.
class orchestrator_self : public orchestrator_actor::base {
 public:
  using orchestrator_actor::base::base;
  void enqueue(caf::mailbox_element_ptr what, caf::execution_unit* host) override;
};

// The orchestrator actor (spawn it as sys.spawn(orchestrator, opts)). Publish it behind its front
// door with PublishedOrchestrator (published.hpp); every actor_system that talks to it needs
// configure_remoting() on its config. Stop it with caf::anon_send_exit from this process.
orchestrator_actor::behavior_type orchestrator(orchestrator_self* self, OrchestratorCore::Options opts);

} // namespace chorus
