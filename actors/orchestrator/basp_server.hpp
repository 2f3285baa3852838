// What the front door's BASP guard (basp_guard.hpp) must know of the orchestrator's side, read
// from its actor system with CAF's own serializer, so that the guard compares bytes with bytes.
#pragma once
#include <caf/actor_system.hpp>
#include <caf/node_id.hpp>

#include <cstdint>
#include <string>

#include "actors/orchestrator/basp_guard.hpp"

namespace chorus {

// The bytes CAF's binary serializer gives a node id (how BASP payloads carry it).
std::string node_id_bytes(const caf::node_id& node);
// `sys`'s node id, `actor`, and the request CAF sends each node it meets, as BASP carries them.
BaspServer basp_server(caf::actor_system& sys, uint64_t actor);

} // namespace chorus
