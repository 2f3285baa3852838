// The atoms that name chorus's control messages (CAF 0.17 atoms, at most 10 characters; a move to
// CAF 1.x starts here). The typed interfaces that use them sit with their actors:
// actors/orchestrator/orchestrator.hpp, actors/global_client/ and actors/local_server/.
#pragma once
#include <caf/all.hpp>

namespace chorus {
using register_atom = caf::atom_constant<caf::atom("register")>;
using finish_atom = caf::atom_constant<caf::atom("finish")>;
using reset_atom = caf::atom_constant<caf::atom("reset")>;
using timeout_atom = caf::atom_constant<caf::atom("timeout")>;
using node_leave_atom = caf::atom_constant<caf::atom("nodeleave")>;
using node_lost_atom = caf::atom_constant<caf::atom("nodelost")>;
using link_lost_atom = caf::atom_constant<caf::atom("linklost")>;
using link_report_atom = caf::atom_constant<caf::atom("linkreport")>;
using status_atom = caf::atom_constant<caf::atom("status")>;
using newcomers_atom = caf::atom_constant<caf::atom("newcomers")>;
using revoke_atom = caf::atom_constant<caf::atom("revoke")>;
} // namespace chorus
