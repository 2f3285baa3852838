// The runtime a host app creates once per process: the actor system (its own, or the host app's)
// and the local server in it. Peers register through it. Host apps that are CAF actors run it in
// their own actor system and talk to peers through peer actors: <chorus/caf.hpp> (chorus::caf).
#pragma once
#include <memory>

#include <chorus/config.hpp>
#include <chorus/peer.hpp>

namespace chorus {

struct RuntimeImpl;
struct HostSystem;  // a host app's CAF actor system (chorus/caf.hpp)

class Runtime {
 public:
  // Runs an actor system of its own (CAF's `sharing` scheduler, two workers), made on first use:
  // the first registration (or peer actor) with a multi-node config makes it with CAF remoting
  // and that config's TLS files, which the node's control side (its link to the orchestrator)
  // then uses; one actor system per process.
  Runtime();
  // Runs in a host app's CAF actor system (chorus/caf.hpp: `Runtime rt{host_system(system)}`): the
  // local server and every peer actor are spawned there (each on a thread of its own, so the
  // host's scheduler never carries an op) and stopped when this Runtime is destroyed, which must
  // happen before that system is destroyed. Multi-node mode needs the system built from a config
  // that prepare_actor_system() saw; without it, registering with num_nodes > 0 fails with
  // Errc::invalid_config.
  explicit Runtime(const HostSystem& host);
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
 private:
  friend struct RuntimeAccess;  // the library's own code (runtime/runtime_impl.hpp)
  std::shared_ptr<RuntimeImpl> impl_;
};

} // namespace chorus
