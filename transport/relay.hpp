// Relays bytes between pairs of sockets, every pair from one thread (epoll). The front door uses
// it between a client that passed the handshake and the orchestrator's loopback BASP port
// (transport/front_door.hpp); a door's client uses it between CAF's connection to a loopback
// listener and the door (transport/door_passage.hpp).
//
// Each direction of a pair holds at most kRelayBuffer bytes: a side that does not read stops the
// reading of the other (TCP's backpressure then reaches its sender), so memory is bounded by the
// number of pairs. When one side closes or fails, what it had sent is delivered to the other,
// then both are closed: the program at the other end sees the connection end as it would without
// the relay (CAF then reports the node or orchestrator lost).
// A pair can also be given a guard on what `a` sends (StreamGuard, below): the front door checks
// every frame a client sends before any of it reaches the orchestrator.
// One side of a pair can carry TLS (a TlsChannel, transport/tls/tls_channel.hpp): what comes from
// it is decrypted before it is relayed (and guarded), what goes to it is encrypted. The channel
// may still be in its handshake (the front door's sealed links: the relay's thread runs it, with
// a deadline); the other side's bytes then wait until it is done.
// A pair can also be given a silence limit for `b`: once `b` has sent nothing for that long, both
// sides are closed, as if `b` had hung up (a door passage's watch on a frozen orchestrator).
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "transport/tls/tls_channel.hpp"

namespace chorus {

inline constexpr std::size_t kRelayBuffer = 16 * 1024;

// Looks at the bytes one side of a pair sends, in order, before they are passed on. The relay
// hands it each read as it comes (a frame may be cut anywhere) and passes the read on only when
// check() returns "", so a guard that decides at the last byte of a frame keeps the whole frame
// from its receiver's parser. A reason closes both sides.
// It also sees, after the fact, what the other side sends (observe), which it may learn from
// (whom the guarded side may answer) but not refuse.
class StreamGuard {
 public:
  virtual ~StreamGuard() = default;
  virtual std::string check(const char* data, std::size_t size) = 0;
  virtual void observe(const char* /*data*/, std::size_t /*size*/) {}
  // The pair is closing: `by_guarded` when the guarded side ended it (its end closed or reset the
  // connection), else the other side did, or the guard refused what came.
  virtual void ended(bool /*by_guarded*/) {}
};

class Relay {
 public:
  Relay();
  // Closes every socket it holds and joins its thread.
  ~Relay();
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  // Relays between the connected sockets a and b, which it owns from now on; `guard` (may be
  // null) checks what a sends. `a_tls` (may be null): a carries TLS through that channel, whose
  // handshake, if not done yet, must be done within `handshake_limit` or the pair is closed.
  void add(int a, int b, std::unique_ptr<StreamGuard> guard = nullptr, std::unique_ptr<TlsChannel> a_tls = nullptr,
           std::chrono::milliseconds handshake_limit = std::chrono::milliseconds{2000});
  // Owns `listener` and the connected socket `b`: accepts connections on `listener` until one
  // passes `accept_ok` (called on the relay's thread; the others are closed), closes the listener
  // and relays that connection with `b`. Returns a token for cancel(). silence > 0: the pair is
  // closed once `b` has sent nothing for that long (counted from the accept). `b_tls` (may be
  // null): b carries TLS through that channel, its handshake done.
  uint64_t add_after_accept(int listener, int b, std::function<bool(int)> accept_ok,
                            std::chrono::milliseconds silence = std::chrono::milliseconds{0},
                            std::unique_ptr<TlsChannel> b_tls = nullptr);
  // Closes the listener and `b` of add_after_accept(token) if no connection was accepted yet.
  void cancel(uint64_t token);
  // Pairs relayed or waiting for their accept.
  std::size_t pairs() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace chorus
