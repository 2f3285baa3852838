// The orchestrator's front door on its own (transport/front_door.hpp), in front of a plain
// loopback listener that stands in for CAF's BASP port: the right secret passes and reaches the
// inner port, a wrong one is refused with "wrong secret" and reaches nothing, a half answer is
// closed at the deadline, bytes cross intact both ways (megabytes each way at once), a close at
// either end closes the other, and the door's bounds (pending handshakes, connections, file
// descriptors) hold; behind it a socket pair from open_inner serves as well as a port, and a
// guard on what the client sends closes its connection before a refused byte gets through.
// The client's side: door_passage_test.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "door_fixtures.hpp"
#include "status_matchers.hpp"
#include "transport/door_handshake.hpp"
#include "transport/relay.hpp"

namespace chorus {
namespace {

using namespace chorus::testing;

TEST(FrontDoor, TheRightSecretPassesAndReachesTheInnerPort) {
  Inner inner;
  Door door(options(inner.port));
  const auto [fd, c] = link_through(door, inner);
  ASSERT_GE(c, 0) << "the door did not connect to the inner port";
  // Both ways, a few bytes: what one end writes the other reads.
  ASSERT_TRUE(write_exact(fd, "ping", 4, in(2000ms)).is_ok());
  char buf[4] = {};
  ASSERT_TRUE(read_exact(c, buf, 4, in(2000ms)).is_ok());
  EXPECT_EQ(std::string(buf, 4), "ping");
  ASSERT_TRUE(write_exact(c, "pong", 4, in(2000ms)).is_ok());
  ASSERT_TRUE(read_exact(fd, buf, 4, in(2000ms)).is_ok());
  EXPECT_EQ(std::string(buf, 4), "pong");
  const auto st = door->stats();
  EXPECT_EQ(st.admitted, 1u);
  EXPECT_EQ(st.rejected, 0u);
  EXPECT_EQ(door->relayed(), 1u);
  EXPECT_EQ(door->pending(), 0u);
  ::close(fd);
  ::close(c);
}

TEST(FrontDoor, AWrongSecretIsRefusedAndReachesNothing) {
  Inner inner;
  Door door(options(inner.port));
  int fd = -1;
  const auto t0 = Clock::now();
  std::unique_ptr<TlsChannel> tls;
  const Status s = pass_door("127.0.0.1", door->port(), "guess", in(3000ms), fd, tls);
  EXPECT_EQ(s, Status(Errc::auth_failed, "wrong secret"));
  EXPECT_LT(Clock::now() - t0, 400ms) << "refused at once, not at the deadline";
  EXPECT_EQ(fd, -1);
  EXPECT_EQ(door->stats().rejected, 1u);
  EXPECT_EQ(door->stats().admitted, 0u);
  // No secret at all against a door that has one: refused alike.
  EXPECT_EQ(pass_door("127.0.0.1", door->port(), "", in(3000ms), fd, tls), Status(Errc::auth_failed, "wrong secret"));
  EXPECT_EQ(door->stats().rejected, 2u);
  EXPECT_EQ(door->relayed(), 0u);
}

TEST(FrontDoor, AHalfSentAnswerIsClosedAtTheDeadline) {
  Inner inner;
  Door door(options(inner.port));  // 500 ms
  const auto t0 = Clock::now();
  const int fd = raw_connect(door->port());
  ASSERT_GE(fd, 0);
  door::Greeting g{};
  ASSERT_TRUE(read_exact(fd, g.data(), g.size(), in(2000ms)).is_ok());
  door::Mode mode{};
  ASSERT_TRUE(door::read_greeting(g, mode));
  EXPECT_EQ(mode, door::Mode::challenge);
  door::Nonce nonce{};
  door::Answer answer{};
  ASSERT_TRUE(door::make_nonce(nonce));
  ASSERT_TRUE(door::make_answer("s3", g, nonce, answer));
  ASSERT_TRUE(write_exact(fd, answer.data(), 32, in(2000ms)).is_ok());  // half of it, right so far
  std::string got;
  EXPECT_TRUE(read_to_eof(fd, got));
  const auto waited = Clock::now() - t0;
  EXPECT_TRUE(got.empty()) << "no verdict for half an answer";
  EXPECT_GE(waited, 490ms);  // not before the deadline (epoll's millisecond rounds up)
  EXPECT_LT(waited, 1500ms);
  EXPECT_EQ(door->stats().expired, 1u);
  EXPECT_EQ(door->pending(), 0u);
  ::close(fd);
}

TEST(FrontDoor, ManyMegabytesCrossIntactBothWaysAtOnce) {
  Inner inner;
  Door door(options(inner.port));
  const auto [fd, c] = link_through(door, inner);
  ASSERT_GE(c, 0);
  constexpr std::size_t kBytes = 8 << 20;  // far beyond the relay's buffers: backpressure at work
  auto pattern = [](std::size_t n, uint32_t seed) {
    std::vector<char> v(n);
    uint32_t x = seed;
    for (auto& b : v) {
      x = x * 1664525u + 1013904223u;
      b = static_cast<char>(x >> 24);
    }
    return v;
  };
  const auto up = pattern(kBytes, 1), down = pattern(kBytes, 2);
  std::vector<char> got_up(kBytes), got_down(kBytes);
  Status w1, w2, r1, r2;
  std::thread a([&] { w1 = write_exact(fd, up.data(), up.size(), in(20000ms)); });
  std::thread b([&] { w2 = write_exact(c, down.data(), down.size(), in(20000ms)); });
  std::thread d([&] { r1 = read_exact(c, got_up.data(), got_up.size(), in(20000ms)); });
  r2 = read_exact(fd, got_down.data(), got_down.size(), in(20000ms));
  a.join();
  b.join();
  d.join();
  ASSERT_TRUE(w1.is_ok() && w2.is_ok() && r1.is_ok() && r2.is_ok())
      << w1.to_string() << " " << w2.to_string() << " " << r1.to_string() << " " << r2.to_string();
  EXPECT_TRUE(got_up == up);
  EXPECT_TRUE(got_down == down);
  ::close(fd);
  ::close(c);
}

TEST(FrontDoor, ACloseAtEitherEndClosesTheOtherAfterWhatWasSent) {
  Inner inner;
  Door door(options(inner.port));
  for (bool client_closes : {true, false}) {
    const auto [fd, c] = link_through(door, inner);
    ASSERT_GE(c, 0);
    const int closer = client_closes ? fd : c;
    const int other = client_closes ? c : fd;
    ASSERT_TRUE(write_exact(closer, "last words", 10, in(2000ms)).is_ok());
    ::close(closer);
    std::string got;
    EXPECT_TRUE(read_to_eof(other, got)) << (client_closes ? "client" : "inner") << " closed, the other end stays open";
    EXPECT_EQ(got, "last words");
    ::close(other);
    EXPECT_TRUE(eventually([&] { return door->relayed() == 0; }));
  }
}

TEST(FrontDoor, WithoutASecretTheDoorGreetsAndLetsThrough) {
  Inner inner;
  Door door(options(inner.port, ""));
  const auto [fd, c] = link_through(door, inner, "");
  ASSERT_GE(c, 0);
  ASSERT_TRUE(write_exact(fd, "x", 1, in(2000ms)).is_ok());
  char x = 0;
  ASSERT_TRUE(read_exact(c, &x, 1, in(2000ms)).is_ok());
  EXPECT_EQ(x, 'x');
  // A client with a secret does not pass: a door that asks for none proves nothing (an impostor
  // greets so), and the client's messages would go to whoever answered.
  int fd2 = -1;
  std::unique_ptr<TlsChannel> tls;
  const Status s = pass_door("127.0.0.1", door->port(), "s3", in(3000ms), fd2, tls);
  EXPECT_EQ(s.code(), Errc::auth_failed) << s.to_string();
  EXPECT_NE(s.message().find("asks for no secret"), std::string::npos) << s.to_string();
  EXPECT_EQ(fd2, -1);
  ::close(fd);
  ::close(c);
}

// A flood of silent connections: the door keeps max_pending, evicting the oldest, and a client
// that answers at once still gets in.
TEST(FrontDoor, SilentConnectionsBeyondTheBoundEvictTheOldest) {
  Inner inner;
  auto o = options(inner.port);
  o.max_pending = 4;
  o.handshake_timeout = 10000ms;  // nothing expires during the test: every close is an eviction
  Door door(o);
  std::vector<int> silent;
  for (int i = 0; i < 10; ++i) silent.push_back(raw_connect(door->port()));
  // Once all are accepted and the door is done with the last (it evicts before it greets):
  EXPECT_TRUE(eventually([&] {
    const auto st = door->stats();
    return st.accepted == 10 && st.evicted + door->pending() == 10 && st.evicted >= 6;
  }));
  EXPECT_EQ(door->stats().evicted, 6u);
  EXPECT_EQ(door->pending(), 4u);
  // The six oldest were closed (after their greeting), the four newest wait.
  for (int i = 0; i < 10; ++i) {
    std::string got;
    const bool closed = read_to_eof(silent[i], got, i < 6 ? 3000ms : 100ms);
    EXPECT_EQ(closed, i < 6) << "connection " << i;
    EXPECT_EQ(got.size(), door::kGreetingSize) << "connection " << i;
  }
  const int fd = pass(door);
  EXPECT_TRUE(eventually([&] { return door->stats().admitted == 1; }));
  for (int s : silent) ::close(s);
  ::close(fd);
}

// All connections in use and no handshake to evict: a new one is closed at once, unread.
TEST(FrontDoor, BeyondMaxConnectionsANewOneIsClosedAtOnce) {
  Inner inner;
  auto o = options(inner.port);
  o.max_connections = 2;
  Door door(o);
  const int a = pass(door), b = pass(door);
  ASSERT_TRUE(a >= 0 && b >= 0);
  ASSERT_TRUE(eventually([&] { return door->relayed() == 2; }));
  const int third = raw_connect(door->port());
  std::string got;
  EXPECT_TRUE(read_to_eof(third, got, 1000ms));
  EXPECT_TRUE(got.empty()) << "no greeting beyond the bound";
  EXPECT_EQ(door->stats().refused, 1u);
  // One relayed connection ends: there is room again.
  ::close(a);
  ASSERT_TRUE(eventually([&] { return door->relayed() == 1; }));
  const int again = pass(door);
  EXPECT_GE(again, 0);
  ::close(third);
  ::close(b);
  ::close(again);
}

// Process CPU time (every thread) in ms.
double cpu_ms() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto ms = [](const timeval& t) { return t.tv_sec * 1e3 + t.tv_usec / 1e3; };
  return ms(u.ru_utime) + ms(u.ru_stime);
}

// Out of file descriptors with no handshake to evict: the door stops accepting for a moment
// rather than spin on a listener it cannot serve, and serves the waiting clients once
// descriptors are free again.
// The door's connection budget from the descriptor limit: a low limit (the 64, where the
// budget was one connection and no job was ever admitted) leaves room for a job; a usual one as
// before.
TEST(FrontDoor, TheConnectionBudgetOfALowDescriptorLimitStillAdmitsAJob) {
  EXPECT_EQ(FrontDoor::connection_budget(64), 16u);
  EXPECT_EQ(FrontDoor::connection_budget(20), FrontDoor::kMinConnections);
  EXPECT_EQ(FrontDoor::connection_budget(1024), 320u);
  EXPECT_EQ(FrontDoor::connection_budget(1 << 20), ((1u << 20) - 64) / 3);
  // Under a limit of 64, ten clients pass the door at once.
  Inner inner;
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  std::vector<Link> links;
  {
    rlimit low = old;
    low.rlim_cur = 64;
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
    Door door(options(inner.port));
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);  // the door read the limit; the test needs room
    for (int i = 0; i < 10; ++i) links.push_back(link_through(door, inner));
    for (const Link& l : links) EXPECT_GE(l.inner, 0) << "a client was not let through";
    EXPECT_EQ(door->stats().refused, 0u);
    EXPECT_TRUE(eventually([&] { return door->relayed() == 10; })) << door->relayed();  // admitted after the verdict
  }
  for (const Link& l : links) {
    ::close(l.client);
    ::close(l.inner);
  }
}

TEST(FrontDoor, OutOfDescriptorsTheDoorPausesInsteadOfSpinning) {
  Inner inner;
  Door door(options(inner.port));
  // The clients' sockets exist before the descriptors run out; they connect afterwards (the
  // kernel completes a connection without the door accepting it).
  std::vector<int> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  // A low limit keeps the hogging cheap; restored below.
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  rlimit low = old;
  low.rlim_cur = std::min<rlim_t>(old.rlim_cur, 512);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(null_fd, 0);
  std::vector<int> hogs{null_fd};
  for (int fd; (fd = dup(null_fd)) >= 0;) hogs.push_back(fd);
  ASSERT_EQ(errno, EMFILE);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(door->port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int c : clients) ASSERT_EQ(connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  ASSERT_TRUE(eventually([&] { return door->stats().paused >= 1; }));
  const double cpu0 = cpu_ms();
  const auto paused0 = door->stats().paused;
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(500ms);  // the measurement's window
  const double window_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  const double used = cpu_ms() - cpu0;
  const auto pauses = door->stats().paused - paused0;
  EXPECT_LT(used, 0.2 * window_ms) << "the door spins while out of descriptors: " << used << " ms of CPU in "
                                   << window_ms << " ms";
  EXPECT_LE(pauses, window_ms / kAcceptPause.count() + 2) << "it tried to accept more often than every "
                                                          << kAcceptPause.count() << " ms";
  EXPECT_EQ(door->stats().accepted, 0u);
  for (int h : hogs) ::close(h);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  for (int c : clients) {  // served once there are descriptors again
    door::Greeting g{};
    EXPECT_TRUE(read_exact(c, g.data(), g.size(), in(3000ms)).is_ok());
    ::close(c);
  }
}

// open_inner instead of a port: each admitted connection gets a socket pair's end, and the bytes
// cross both ways as through a port.
TEST(FrontDoor, OpenInnerServesAConnectionWithoutAnyPort) {
  int kept = -1;  // the orchestrator's end of the last pair
  FrontDoor::Options o = options(0);
  o.open_inner = [&kept] {
    int ends[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) return -1;
    kept = ends[0];
    return ends[1];
  };
  Door door(std::move(o));
  const int fd = pass(door);
  ASSERT_GE(fd, 0);
  ASSERT_GE(kept, 0);
  ASSERT_TRUE(write_exact(fd, "ping", 4, in(2000ms)).is_ok());
  char buf[4] = {};
  ASSERT_TRUE(read_exact(kept, buf, 4, in(2000ms)).is_ok());
  EXPECT_EQ(std::string(buf, 4), "ping");
  ASSERT_TRUE(write_exact(kept, "pong", 4, in(2000ms)).is_ok());
  ASSERT_TRUE(read_exact(fd, buf, 4, in(2000ms)).is_ok());
  EXPECT_EQ(std::string(buf, 4), "pong");
  EXPECT_EQ(door->stats().admitted, 1u);
  ::close(fd);
  ::close(kept);
}

// A guard that refuses the byte 'X': everything before the read that holds it gets through, none
// of that read does, and both ends are closed; the door counts it.
TEST(FrontDoor, AGuardClosesTheConnectionBeforeARefusedReadGetsThrough) {
  Inner inner;
  FrontDoor::Options o = options(inner.port);
  o.make_guard = [] { return std::make_unique<RefuseX>(); };
  Door door(std::move(o));
  const auto [fd, c] = link_through(door, inner);
  ASSERT_GE(c, 0);
  ASSERT_TRUE(write_exact(fd, "fine", 4, in(2000ms)).is_ok());
  char buf[4] = {};
  ASSERT_TRUE(read_exact(c, buf, 4, in(2000ms)).is_ok());
  EXPECT_EQ(std::string(buf, 4), "fine");
  // What the orchestrator's side sends is not the guard's business.
  ASSERT_TRUE(write_exact(c, "X ok", 4, in(2000ms)).is_ok());
  ASSERT_TRUE(read_exact(fd, buf, 4, in(2000ms)).is_ok());
  EXPECT_EQ(std::string(buf, 4), "X ok");
  ASSERT_TRUE(write_exact(fd, "abXd", 4, in(2000ms)).is_ok());
  std::string got;
  EXPECT_TRUE(read_to_eof(c, got)) << "the orchestrator's side was not closed";
  EXPECT_EQ(got, "") << "bytes of the refused read got through";
  std::string back;
  EXPECT_TRUE(read_to_eof(fd, back)) << "the client's side was not closed";
  EXPECT_EQ(door->stats().blocked, 1u);
  EXPECT_TRUE(eventually([&] { return door->relayed() == 0; }));
  ::close(fd);
  ::close(c);
}

} // namespace
} // namespace chorus
