// The local server actor: one per process, owns a LocalServerCore and feeds it messages.
#pragma once
#include "actors/caf_glue.hpp"

namespace chorus {

// Message interface (all replies go through Call::reply, never through a CAF response):
//   (register_atom, Call)  (finish_atom, Call)  (reset_atom, Call)  (op_atom, Call)
caf::behavior local_server(caf::event_based_actor* self);

} // namespace chorus
