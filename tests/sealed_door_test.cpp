// The front door's sealed mode (transport/front_door.hpp, door_handshake.hpp): after the challenge
// the link is TLS 1.3 keyed by the secret and both nonces, run on the door's side by its relay.
// What the client sends reaches the inner port as plaintext and crosses the wire as ciphertext,
// megabytes each way at once; the guard sees inside; a client that skips TLS, or never starts it,
// reaches nothing.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "door_fixtures.hpp"
#include "hostile_clients.hpp"
#include "sealed_link.hpp"
#include "status_matchers.hpp"
#include "transport/door_handshake.hpp"
#include "transport/relay.hpp"

namespace chorus {
namespace {

using namespace chorus::testing;

FrontDoor::Options sealed(uint16_t inner) {
  FrontDoor::Options o = options(inner);
  o.seal = true;
  return o;
}

std::vector<char> pattern(std::size_t n, uint32_t seed) {
  std::vector<char> v(n);
  uint32_t x = seed;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<char>(x >> 24);
  }
  return v;
}

TEST(SealedDoor, WhatCrossesIsCiphertextAndWhatArrivesIsPlaintext) {
  Inner inner;
  Door door(sealed(inner.port));
  RecordingProxy proxy(door->port());
  ASSERT_GT(proxy.port, 0);
  Status s;
  SealedLink link = pass_sealed(proxy.port, "s3", &s);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  ASSERT_TRUE(link.tls) << "a sealed door's link came back without TLS";
  const int c = inner.next();
  ASSERT_GE(c, 0);
  const std::string up = "registration: node at 10.1.2.3:7101, up", down = "topology: collective 42, down";
  ASSERT_TRUE(link.send_all(up));
  std::string got(up.size(), '\0');
  ASSERT_TRUE(read_exact(c, got.data(), got.size(), in(3000ms)).is_ok());
  EXPECT_EQ(got, up);
  ASSERT_TRUE(write_exact(c, down.data(), down.size(), in(3000ms)).is_ok());
  std::string back(down.size(), '\0');
  ASSERT_TRUE(link.read_exact(back.data(), back.size(), in(3000ms)).is_ok());
  EXPECT_EQ(back, down);
  const std::string wire = proxy.captured();
  EXPECT_GT(wire.size(), up.size() + down.size());
  EXPECT_EQ(wire.find("10.1.2.3:7101"), std::string::npos) << "the client's bytes crossed in the clear";
  EXPECT_EQ(wire.find("collective 42"), std::string::npos) << "the inner side's bytes crossed in the clear";
  ::close(c);
}

// Far beyond the relay's buffers and TLS's records both ways at once: backpressure through the
// channel, records taken whole or in parts.
TEST(SealedDoor, ManyMegabytesCrossIntactBothWaysAtOnce) {
  Inner inner;
  Door door(sealed(inner.port));
  Status st;
  SealedLink link = pass_sealed(door->port(), "s3", &st);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  const int c = inner.next();
  ASSERT_GE(c, 0);
  constexpr std::size_t kBytes = 8 << 20;
  const auto up = pattern(kBytes, 1), down = pattern(kBytes, 2);
  std::vector<char> got_up(kBytes), got_down(kBytes);
  Status w1, w2, r1, r2;
  std::thread a([&] { w1 = link.tls->write_all(link.fd, up.data(), up.size(), in(30000ms)); });
  std::thread b([&] { w2 = write_exact(c, down.data(), down.size(), in(30000ms)); });
  std::thread d([&] { r1 = read_exact(c, got_up.data(), got_up.size(), in(30000ms)); });
  r2 = link.read_exact(got_down.data(), got_down.size(), in(30000ms));
  a.join();
  b.join();
  d.join();
  ASSERT_TRUE(w1.is_ok() && w2.is_ok() && r1.is_ok() && r2.is_ok())
      << w1.to_string() << " " << w2.to_string() << " " << r1.to_string() << " " << r2.to_string();
  EXPECT_TRUE(got_up == up);
  EXPECT_TRUE(got_down == down);
  ::close(c);
}

// A client that passed the challenge and then sends plaintext (as a door that did not seal would
// take): none of it reaches the inner side, and both ends are closed.
TEST(SealedDoor, AClientThatSkipsTlsReachesNothing) {
  Inner inner;
  Door door(sealed(inner.port));
  const int fd = raw_connect(door->port());
  ASSERT_GE(fd, 0);
  door::Greeting g{};
  ASSERT_TRUE(answer_challenge(fd, g));
  door::Mode mode{};
  ASSERT_TRUE(door::read_greeting(g, mode));
  EXPECT_EQ(mode, door::Mode::sealed);
  std::array<uint8_t, 1 + door::kProofSize> verdict{};
  ASSERT_TRUE(read_exact(fd, verdict.data(), verdict.size(), in(2000ms)).is_ok());
  ASSERT_EQ(verdict[0], door::kAccepted);
  const int c = inner.next();
  ASSERT_GE(c, 0);
  const std::string basp = basp_header(0, 0, 0);  // the 32 bytes that once crashed the daemon
  ASSERT_TRUE(write_exact(fd, basp.data(), basp.size(), in(2000ms)).is_ok());
  std::string got, back;
  EXPECT_TRUE(read_to_eof(c, got)) << "the inner side was not closed";
  EXPECT_EQ(got, "") << "plaintext got past a sealed door";
  EXPECT_TRUE(read_to_eof(fd, back)) << "the client was not closed";
  EXPECT_TRUE(eventually([&] { return door->relayed() == 0; }));
  ::close(fd);
  ::close(c);
}

// A client that passed the challenge and never starts TLS is closed at the handshake's deadline.
TEST(SealedDoor, AClientThatNeverStartsTlsIsClosedAtTheDeadline) {
  Inner inner;
  Door door(sealed(inner.port));  // 500 ms to hand shake
  const int fd = raw_connect(door->port());
  ASSERT_GE(fd, 0);
  door::Greeting g{};
  ASSERT_TRUE(answer_challenge(fd, g));
  const auto t0 = Clock::now();
  std::string back;
  EXPECT_TRUE(read_to_eof(fd, back, 3000ms)) << "a link that never sealed stayed open";
  EXPECT_LT(Clock::now() - t0, 2000ms);
  EXPECT_EQ(back.size(), 1 + door::kProofSize) << "only the verdict came";
  EXPECT_TRUE(eventually([&] { return door->relayed() == 0; }));
  ::close(fd);
}

// The guard sees inside TLS: a refused byte closes the connection before it reaches the inner side.
TEST(SealedDoor, TheGuardSeesInsideTheSeal) {
  Inner inner;
  FrontDoor::Options o = sealed(inner.port);
  o.make_guard = [] { return std::make_unique<RefuseX>(); };
  Door door(std::move(o));
  Status st;
  SealedLink link = pass_sealed(door->port(), "s3", &st);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  const int c = inner.next();
  ASSERT_GE(c, 0);
  ASSERT_TRUE(link.send_all("fine"));
  char buf[4] = {};
  ASSERT_TRUE(read_exact(c, buf, 4, in(2000ms)).is_ok());
  EXPECT_EQ(std::string(buf, 4), "fine");
  ASSERT_TRUE(link.send_all("abXd"));
  std::string got, back;
  EXPECT_TRUE(read_to_eof(c, got)) << "the inner side was not closed";
  EXPECT_EQ(got, "") << "bytes of the refused read got through";
  EXPECT_TRUE(link.read_until_closed(back, 3000ms)) << "the client was not closed";
  EXPECT_EQ(door->stats().blocked, 1u);
  ::close(c);
}

} // namespace
} // namespace chorus
