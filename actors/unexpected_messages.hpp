// What a chorus actor that hears from the network does with a message it has no handler for.
// CAF's default (print_and_drop) prints each one on standard output: anyone who can reach the
// actor could fill a daemon's output at will. These actors log it at trace level instead, count
// it, and answer a request with CAF's unexpected_message error, as CAF would.
#pragma once
#include <caf/scheduled_actor.hpp>

#include <cstdint>

namespace chorus {

// Installs the quiet handler on `self` (its lines in the log's orch subsystem: the actors that
// hear from the network are the orchestrator's and the nodes' side of it).
void drop_unexpected_quietly(caf::scheduled_actor* self);
// Messages dropped so by every actor of this process.
uint64_t unexpected_messages();

} // namespace chorus
