// The runtime a host app creates once per process: the actor system (its own, or the host app's)
// and the local server in it. Peers register through it; actors of the host app can talk to
// peers through peer actors (chorus/peer_actor.hpp).
#pragma once
#include <memory>

#include <chorus/config.hpp>
#include <chorus/peer.hpp>

namespace caf {
class actor_system;
}

namespace chorus {

struct RuntimeImpl;

class Runtime {
 public:
  // Runs an actor system of its own (CAF's `sharing` scheduler, two workers).
  Runtime();
  // Runs in the host app's actor system: the local server and every peer actor are spawned there
  // (each on a thread of its own, so the host's scheduler never carries an op) and stopped when
  // this Runtime is destroyed, which must happen before `host` is destroyed. Multi-node mode
  // needs `host` built with CAF's middleman (cfg.load<caf::io::middleman>()); without it,
  // registering with num_nodes > 0 fails with Errc::invalid_config.
  explicit Runtime(caf::actor_system& host);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Joins peer `id` to the collective. The first register fixes the config; later ones must match.
  Result<Peer> register_peer(PeerId id, const Config& config);
  // Drops every registration and fails every op in flight with Errc::reset.
  Status reset();
  // The actor system this runtime runs in (its own or the host's), for spawning actors into it.
  caf::actor_system& actor_system();

 private:
  friend struct RuntimeAccess;  // the library's own code (actors/runtime_impl.hpp)
  std::shared_ptr<RuntimeImpl> impl_;
};

} // namespace chorus
