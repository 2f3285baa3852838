// Where this node's peers stand, for the orchestrator's status requests (chorus-ctl status): each
// local peer's newest op from the flight recorder and, for one in flight, what it waits for: its
// node-mates while it waits in the local server, other nodes (the op's NetOp) while its data moves.
#pragma once
#include <cstdint>

#include "messages/status_codec.hpp"

namespace chorus {

class FlightRecorder;
class GlobalClient;
class LocalServerCore;

// `flight` may be null (the recorder is off): the answer then says so instead of naming ops.
NodeStatusData node_status(const FlightRecorder* flight, const LocalServerCore& core, GlobalClient& client);

} // namespace chorus
