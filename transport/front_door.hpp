// The orchestrator's public port. CAF's BASP parses and acts on whatever a connection sends, so
// this door stands in front of it: it accepts connections, runs the handshake of
// door_handshake.hpp within a short deadline, and only then opens the orchestrator's side of the
// connection (below) and relays the bytes both ways (transport/relay.hpp). A stranger's bytes
// never reach CAF: the door reads the 64 of an answer and nothing else.
//
// Bounds: at most max_pending handshakes (a new connection beyond evicts the oldest, so a flood
// of silent connections cannot keep a node that answers at once from getting in) and
// max_connections in all (beyond, with no handshake to evict, a new one is closed at once). Out of
// file descriptors, the door evicts its oldest handshake to make room, or with none stops
// accepting for kAcceptPause instead of spinning on a listener it cannot serve.
// Behind the door, the orchestrator's side of each admitted connection comes from open_inner (a
// socket pair handed to CAF in-process: no port of CAF's to reach at all) or else from a
// connection to inner_port on 127.0.0.1, and what the client sends passes the guard that
// make_guard makes for it (CAF's BASP frames checked one by one) before CAF reads it.
// One thread runs the handshakes (epoll); the relay has its own.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <chorus/result.hpp>
#include "transport/tls/tls_channel.hpp"

namespace chorus {

class StreamGuard;
inline constexpr std::chrono::milliseconds kAcceptPause{100};

class FrontDoor {
 public:
  struct Options {
    std::string host = "127.0.0.1";  // the public address (0.0.0.0: every interface)
    uint16_t port = 0;               // 0: a free port (see port())
    uint16_t inner_port = 0;         // the orchestrator's BASP port on 127.0.0.1, when no open_inner
    // The orchestrator's side of an admitted connection: a connected socket the door owns from
    // then on, or -1 with errno set. Called on the door's thread; must not block.
    std::function<int()> open_inner;
    // A guard for what one admitted client sends (null: none); its reason closes the connection
    // and is logged once with the client's address.
    std::function<std::unique_ptr<StreamGuard>()> make_guard;
    std::string secret;              // empty: no challenge (TLS is the check, or nothing is)
    // With a secret: after the challenge, the link is TLS 1.3 keyed by the secret and both nonces
    // (door_handshake.hpp's sealed mode), run by the door's relay; the guard sees what is inside.
    bool seal = false;
    // Certificates (TlsContext::load): after the challenge, if any, the link is TLS with them
    // instead (the certified modes): every client must present one the CA signed.
    std::shared_ptr<TlsContext> certified;
    std::chrono::milliseconds handshake_timeout{2000};
    std::size_t max_pending = 64;
    std::size_t max_connections = 1024;  // handshakes and relayed connections together
  };
  // What happened so far (tests, the daemon's logs).
  struct Stats {
    uint64_t accepted = 0;   // connections taken from the listener
    uint64_t refused = 0;    // closed at once: max_connections reached, nothing to evict
    uint64_t evicted = 0;    // handshakes closed to make room for a newer connection
    uint64_t expired = 0;    // handshakes closed at their deadline
    uint64_t rejected = 0;   // wrong answers (told so, then closed)
    uint64_t abandoned = 0;  // closed by the client during the handshake
    uint64_t admitted = 0;   // handed to the relay
    uint64_t paused = 0;     // times accepting stopped for lack of file descriptors
    uint64_t blocked = 0;    // admitted connections closed by their guard
  };

  // Listens on host:port and starts serving. max_connections is capped by connection_budget() of
  // the descriptor limit (with a warning in the log below 64).
  static Result<std::unique_ptr<FrontDoor>> open(Options opts);
  // How many connections a descriptor limit leaves room for: three descriptors each, after a
  // reserve for the rest of the process (64, or a quarter of a small limit), and never fewer than
  // kMinConnections, so a low limit (64: 16 connections) still admits a job.
  static constexpr std::size_t kMinConnections = 8;
  static std::size_t connection_budget(std::size_t fd_limit);
  // Stops accepting, closes every handshake and relayed connection, joins its threads.
  ~FrontDoor();
  FrontDoor(const FrontDoor&) = delete;
  FrontDoor& operator=(const FrontDoor&) = delete;

  uint16_t port() const { return port_; }
  Stats stats() const;
  // Handshakes in progress, and connections relayed now.
  std::size_t pending() const;
  std::size_t relayed() const;

 private:
  struct Impl;
  FrontDoor() = default;
  std::unique_ptr<Impl> impl_;
  uint16_t port_ = 0;
};

} // namespace chorus
