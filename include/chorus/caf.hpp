// chorus inside a host app's CAF actor system (optional: link chorus::caf, which brings CAF's
// headers): a Runtime that runs in the host's system, the config a multi-node host system needs,
// and peer actors (chorus/peer_actor.hpp), for host apps whose workers are actors.
//
//   caf::actor_system_config cfg;
//   chorus::prepare_actor_system(cfg, config);   // only for multi-node mode (num_nodes > 0)
//   caf::actor_system system{cfg};
//   chorus::Runtime runtime{chorus::host_system(system)};  // declared after the system
#pragma once
#include <caf/fwd.hpp>

#include <chorus/config.hpp>
#include <chorus/peer_actor.hpp>
#include <chorus/runtime.hpp>

namespace chorus {

// Names a host app's actor system for Runtime's constructor.
struct HostSystem {
  caf::actor_system* system = nullptr;
};
inline HostSystem host_system(caf::actor_system& system) { return HostSystem{&system}; }

// Readies a host app's actor-system config for multi-node mode with `config`, before the
// actor_system is constructed: CAF's middleman, chorus's message type, the heartbeats that let a
// frozen orchestrator be noticed, and TLS with config's TLS files when it has them.
void prepare_actor_system(caf::actor_system_config& cfg, const Config& config);

// The actor system `runtime` runs in (its own or the host's), for spawning actors into it. In the
// runtime's own mode, asking for it before any registration makes a one-process system. Actors
// spawned into the runtime's own system must be gone before the Runtime is destroyed (it waits
// for them), as must peer_actor handles kept by the host app.
caf::actor_system& actor_system_of(Runtime& runtime);

} // namespace chorus
