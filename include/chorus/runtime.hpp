// The runtime a host app creates once per process: the actor system (its own, or the host app's)
// and the local server in it. Peers register through it; actors of the host app can talk to
// peers through peer actors (chorus/peer_actor.hpp).
#pragma once
#include <memory>

#include <chorus/config.hpp>
#include <chorus/peer.hpp>

namespace caf {
class actor_system;
class actor_system_config;
}

namespace chorus {

struct RuntimeImpl;

class Runtime {
 public:
  // Runs an actor system of its own (CAF's `sharing` scheduler, two workers), made on first use:
  // the first registration (or peer actor) with a multi-node config makes it with CAF remoting
  // and that config's TLS files, which the node's control side (its link to the orchestrator)
  // then uses; one actor system per process.
  Runtime();
  // Runs in the host app's actor system: the local server and every peer actor are spawned there
  // (each on a thread of its own, so the host's scheduler never carries an op) and stopped when
  // this Runtime is destroyed, which must happen before `host` is destroyed. Multi-node mode
  // needs `host` built from a config that prepare() saw; without it, registering with
  // num_nodes > 0 fails with Errc::invalid_config.
  explicit Runtime(caf::actor_system& host);
  // Readies a host app's actor-system config for multi-node mode with `config`, before the
  // actor_system is constructed: CAF's middleman, chorus's message type, the heartbeats that let
  // a frozen orchestrator be noticed, and TLS with config's TLS files when it has them.
  static void prepare(caf::actor_system_config& cfg, const Config& config);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Joins peer `id` to the collective. The first register fixes the config; later ones must match.
  // A Runtime serves one kind of collective for its life, one process's or one node's share of a
  // multi-node one: the other kind is an invalid_config error (it needs a Runtime of its own). A
  // node joins the orchestrator once, for its first registration; if that join fails, every
  // registration of the node gets the same error (a new Runtime may try again).
  Result<Peer> register_peer(PeerId id, const Config& config);
  // Drops every registration and fails every op in flight with Errc::reset.
  Status reset();
  // The actor system this runtime runs in (its own or the host's), for spawning actors into it.
  // In the runtime's own mode, asking for it before any registration makes a one-process system.
  // Actors spawned into the runtime's own system must be gone before the Runtime is destroyed (it
  // waits for them), as must peer_actor handles kept by the host app.
  caf::actor_system& actor_system();

 private:
  friend struct RuntimeAccess;  // the library's own code (actors/runtime_impl.hpp)
  std::shared_ptr<RuntimeImpl> impl_;
};

} // namespace chorus
