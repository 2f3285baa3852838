// The runtime a host app creates once per process: it owns the actor system and the local server.
// Peers register through it; actors of the host app can talk to peers through peer actors.
#pragma once
#include <memory>

#include <chorus/config.hpp>
#include <chorus/peer.hpp>

namespace chorus {

struct RuntimeImpl;

class Runtime {
 public:
  Runtime();
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Joins peer `id` to the collective. The first register fixes the config; later ones must match.
  Result<Peer> register_peer(PeerId id, const Config& config);
  // Drops every registration and fails every op in flight with Errc::reset.
  Status reset();

 private:
  friend struct RuntimeAccess;  // the library's own code (actors/runtime_impl.hpp)
  std::shared_ptr<RuntimeImpl> impl_;
};

} // namespace chorus
