// The local server actor: one per process, owns a LocalServerCore and feeds it messages.
#pragma once
#include "actors/atoms.hpp"
#include "actors/local_server/call.hpp"

namespace chorus {

class LocalServerCore;

// Message interface (all replies go through Call::reply, never through a CAF response):
//   (register_atom, Call)  (finish_atom, Call)  (reset_atom, Call)  (op_atom, Call)  (group_atom, Call)
// This form owns its core and expires requests with CAF timers.
caf::behavior local_server(caf::event_based_actor* self);
// This form shares `core` with the peer threads of the runtime, which enter it directly for ops
// and expire their own requests when their deadline passes.
caf::behavior local_server_sharing(caf::event_based_actor* self, std::shared_ptr<LocalServerCore> core);

} // namespace chorus

// A Call holds pointers into this process (buffers, the reply slot): it never leaves the process.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(chorus::Call)
