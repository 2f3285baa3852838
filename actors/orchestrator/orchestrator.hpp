// The orchestrator actor: the shell around OrchestratorCore (orchestrator_core.hpp) that takes its
// messages, monitors the nodes and runs its timers.
//
// Protocol (messages/chorus.capnp, every payload a chorus::Envelope):
//   node -> orch  request (register_atom, NodeRegister)  => NodeRegisterReply (delayed until the
//                 collective is complete; an error reply at once on rejection)
//   node -> orch  (node_leave_atom, NodeLeave)           one-way: the node leaves the collective
//   orch -> node  (node_lost_atom, NodeLost)             a node of the complete collective was lost
//   anyone -> orch request (get_atom) => (uint64 collective, uint64 registered, bool complete)
#pragma once
#include <caf/io/all.hpp>

#include "actors/caf_glue.hpp"
#include "actors/orchestrator/orchestrator_core.hpp"
#include "actors/remoting.hpp"

namespace chorus {

using node_leave_atom = caf::atom_constant<caf::atom("nodeleave")>;
using node_lost_atom = caf::atom_constant<caf::atom("nodelost")>;

// The orchestrator actor. Publish it with publish_remote() (actors/remoting.hpp); every
// actor_system that talks to it needs configure_remoting() on its config. Stop it with an exit
// message.
caf::behavior orchestrator(caf::event_based_actor* self, OrchestratorCore::Options opts);

} // namespace chorus
