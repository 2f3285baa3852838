// What the front door's tests (front_door_test, door_passage_test) share: a plain loopback
// listener standing in for CAF's BASP port behind a door, the door itself, and raw connections.
#pragma once
#include <gtest/gtest.h>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "transport/door_handshake.hpp"
#include "transport/door_passage.hpp"
#include "transport/front_door.hpp"
#include "transport/relay.hpp"
#include "transport/socket.hpp"

namespace chorus::testing {

using namespace std::chrono_literals;

inline Clock::time_point in(std::chrono::milliseconds d) { return Clock::now() + d; }

// A listener standing in for the orchestrator's BASP port.
struct Inner {
  int fd = -1;
  uint16_t port = 0;
  Inner() { EXPECT_TRUE(tcp_listen("127.0.0.1", 0, fd, port).is_ok()); }
  ~Inner() { ::close(fd); }
  // The next connection the door made, or -1 within `limit`.
  int next(std::chrono::milliseconds limit = 3000ms) {
    int c = -1;
    (void)tcp_accept(fd, in(limit), c);
    return c;
  }
};

struct Door {
  std::unique_ptr<FrontDoor> door;
  explicit Door(FrontDoor::Options o) {
    auto d = FrontDoor::open(std::move(o));
    EXPECT_TRUE(d.is_ok()) << d.status().to_string();
    if (d) door = std::move(*d);
  }
  FrontDoor* operator->() { return door.get(); }
};

inline FrontDoor::Options options(uint16_t inner, const std::string& secret = "s3") {
  FrontDoor::Options o;
  o.inner_port = inner;
  o.secret = secret;
  o.handshake_timeout = 500ms;
  return o;
}

// Passes the door with `secret`: the client's socket, or -1.
inline int pass(Door& door, const std::string& secret = "s3") {
  int fd = -1;
  std::unique_ptr<TlsChannel> tls;
  const Status s = pass_door("127.0.0.1", door->port(), secret, in(3000ms), fd, tls);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  return fd;
}

// A connection through the door: the client's end and the inner port's end (-1 where missing).
struct Link {
  int client = -1, inner = -1;
};
inline Link link_through(Door& door, Inner& inner, const std::string& secret = "s3") {
  Link l;
  l.client = pass(door, secret);
  if (l.client >= 0) l.inner = inner.next();
  return l;
}

// Until pred() holds or `limit` passes (a condition with a deadline, not a sleep that orders).
template <class Pred>
inline bool eventually(Pred pred, std::chrono::milliseconds limit = 3000ms) {
  const auto end = in(limit);
  while (!pred()) {
    if (Clock::now() >= end) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// A client's side of the challenge by hand on a raw connection `fd`: reads the greeting (into `g`),
// answers it rightly with `secret`. False when a step fails.
inline bool answer_challenge(int fd, door::Greeting& g, const std::string& secret = "s3") {
  door::Nonce nonce{};
  door::Answer answer{};
  return read_exact(fd, g.data(), g.size(), in(2000ms)).is_ok() && door::make_nonce(nonce) &&
         door::make_answer(secret, g, nonce, answer) && write_exact(fd, answer.data(), answer.size(), in(2000ms)).is_ok();
}

// A guard that refuses any read holding an 'X'.
struct RefuseX : StreamGuard {
  std::string check(const char* data, std::size_t size) override {
    return std::string(data, size).find('X') == std::string::npos ? "" : "an X";
  }
};

// A plain connection to the door; -1 when it fails.
inline int raw_connect(uint16_t port) {
  int fd = -1;
  return tcp_connect("127.0.0.1", port, in(2000ms), fd).is_ok() ? fd : -1;
}

// Reads until EOF (true) or the limit (false), keeping what came.
inline bool read_to_eof(int fd, std::string& got, std::chrono::milliseconds limit = 3000ms) {
  const auto end = in(limit);
  char buf[4096];
  while (Clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    const ssize_t r = recv(fd, buf, sizeof buf, 0);
    if (r == 0) return true;
    if (r < 0) return errno == ECONNRESET;
    got.append(buf, static_cast<std::size_t>(r));
  }
  return false;
}

} // namespace chorus::testing
