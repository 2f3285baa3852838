// The client's side of an orchestrator's front door (transport/front_door.hpp), for CAF: CAF can
// only connect to a host and port, so the passage passes the door first (connects, answers the
// challenge with the shared secret and checks the door's own proof, then runs TLS over it, keyed
// by the secret at a sealed door or with certificates at a certified one), then listens on a
// loopback port of its own. CAF connects there; that one connection (from this process:
// own_connection.hpp) is relayed through the door's socket by a relay shared by the process,
// which encrypts and decrypts: CAF itself speaks plain BASP, on loopback, to its own process.
// When either end closes, so does the other, and CAF reports the orchestrator lost as it would
// over a direct connection.
#pragma once
#include <cstdint>
#include <string>

#include <chorus/result.hpp>
#include "core/wait.hpp"
#include "transport/tls/tls_channel.hpp"

namespace chorus {

// Connects to the door at host:port and completes its handshake before the deadline; `fd` is
// then the connected socket, past the handshake. A door that closes the connection before it
// answered (full: it evicts its oldest handshakes under a flood) is tried again, pausing 50 ms
// doubling to 400 ms. Errors: auth_failed "wrong secret" (the door refused our answer) or
// naming a door whose proof is wrong; version_mismatch for something that is no door;
// unreachable or timeout. A sealed door's link is TLS from then on, and so is a certified door's
// (with `certified`: this side's certificates; auth_failed when one side has certificates and
// the other not, or the TLS handshake fails): `tls` is its channel (null from any other door),
// through which everything on `fd` must go.
Status pass_door(const std::string& host, uint16_t port, const std::string& secret, Clock::time_point deadline,
                 int& fd, std::unique_ptr<TlsChannel>& tls, const TlsContext* certified = nullptr);

class DoorPassage {
 public:
  DoorPassage() = default;
  // pass_door(), then a loopback listener whose first connection from this process is relayed
  // through the door's socket. silence > 0: an orchestrator that sends nothing (not even BASP's
  // heartbeats) for that long is taken for frozen and the connection closed, so CAF reports it
  // lost (the watch CAF cannot keep on a connecting side: LinkEnd in actors/remoting.hpp).
  static Result<DoorPassage> open(const std::string& host, uint16_t port, const std::string& secret,
                                  Clock::time_point deadline,
                                  std::chrono::milliseconds silence = std::chrono::milliseconds{0},
                                  const TlsContext* certified = nullptr);
  DoorPassage(DoorPassage&& o) noexcept;
  DoorPassage& operator=(DoorPassage&& o) noexcept;
  // A passage nobody connected to is closed (its listener and the door's socket); one taken
  // lives on in the relay until either end closes.
  ~DoorPassage();

  // Where CAF connects: 127.0.0.1 and this port.
  uint16_t port() const { return port_; }
  // How many passages this process has opened (each one a door handshake and, behind it, a new
  // CAF connection): a shrink or grow reuses its node's link, and the tests check it.
  static uint64_t opened();

 private:
  uint16_t port_ = 0;
  uint64_t token_ = 0;  // the relay's, 0: none
};

} // namespace chorus
