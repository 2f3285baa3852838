// The atoms that name chorus's control messages (CAF 0.17 atoms: a move to CAF 1.x starts here).
#pragma once
#include <caf/all.hpp>

namespace chorus {
using register_atom = caf::atom_constant<caf::atom("register")>;
using finish_atom = caf::atom_constant<caf::atom("finish")>;
using reset_atom = caf::atom_constant<caf::atom("reset")>;
using op_atom = caf::atom_constant<caf::atom("op")>;
using group_atom = caf::atom_constant<caf::atom("group")>;
using timeout_atom = caf::atom_constant<caf::atom("timeout")>;
} // namespace chorus
