// The thin CAF-specific layer: atoms naming the control messages and the declarations that let our
// in-process side-car types ride in CAF messages. A move to CAF 1.x touches this file, the actor
// shells (local_server.cpp, peer_actor.cpp) and runtime.cpp, nothing else.
#pragma once
#include <caf/all.hpp>

#include "actors/call.hpp"

namespace chorus {
using register_atom = caf::atom_constant<caf::atom("register")>;
using finish_atom = caf::atom_constant<caf::atom("finish")>;
using reset_atom = caf::atom_constant<caf::atom("reset")>;
using op_atom = caf::atom_constant<caf::atom("op")>;
using group_atom = caf::atom_constant<caf::atom("group")>;
using timeout_atom = caf::atom_constant<caf::atom("timeout")>;
} // namespace chorus

// A Call holds pointers into this process (buffers, the reply slot): it never leaves the process.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(chorus::Call)
