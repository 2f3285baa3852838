// The client's side of the front door (transport/door_passage.hpp): it refuses a door whose proof
// is wrong, an impostor that replays a real door's greeting and proof, and something that is no
// door, takes on its loopback port only a connection this
// process opened, and relays that one through the door (a close at the far end closes it).
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "door_fixtures.hpp"
#include "status_matchers.hpp"
#include "transport/door_handshake.hpp"
#include "transport/own_connection.hpp"

namespace chorus {
namespace {

using namespace chorus::testing;

// A fake door that greets with a challenge and accepts any answer with a wrong proof, as a
// stranger posing as the orchestrator would: the client refuses it.
TEST(DoorPassage, ADoorWithAWrongProofOrNoDoorAtAllIsRefused) {
  for (bool greets : {true, false}) {
    int listener = -1;
    uint16_t port = 0;
    ASSERT_TRUE(tcp_listen("127.0.0.1", 0, listener, port).is_ok());
    std::thread fake([&] {
      int c = -1;
      if (!tcp_accept(listener, in(3000ms), c).is_ok()) return;
      door::Greeting g{};
      if (greets) (void)door::make_greeting(door::Mode::challenge, g);
      else std::memcpy(g.data(), "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n", g.size());
      (void)write_exact(c, g.data(), g.size(), in(2000ms));
      door::Answer answer{};
      if (greets && read_exact(c, answer.data(), answer.size(), in(2000ms)).is_ok()) {
        std::array<uint8_t, 1 + door::kProofSize> verdict{};
        verdict[0] = door::kAccepted;  // and a proof of zeros
        (void)write_exact(c, verdict.data(), verdict.size(), in(2000ms));
      }
      std::string rest;
      (void)read_to_eof(c, rest, 2000ms);
      ::close(c);
    });
    int fd = -1;
    std::unique_ptr<TlsChannel> tls;
    const Status s = pass_door("127.0.0.1", port, "s3", in(3000ms), fd, tls);
    if (greets) EXPECT_TRUE(has(s, Errc::auth_failed, {"does not know the secret"})) << s.to_string();
    else EXPECT_TRUE(has(s, Errc::version_mismatch, {"does not greet as a chorus front door"})) << s.to_string();
    EXPECT_EQ(fd, -1);
    fake.join();
    ::close(listener);
  }
}

// The passage's loopback port relays only a connection this process opened.
// An impostor that saw one real exchange (the door's greeting and its accepting proof) replays
// both to the next client: the client's own nonce makes the old proof wrong, so it is refused
// before it sends anything past its answer (which is worth nothing on another connection).
TEST(DoorPassage, AnImpostorReplayingARealDoorsGreetingAndProofIsRefused) {
  Inner inner;
  Door real(options(inner.port));
  const int seen = raw_connect(real->port());
  ASSERT_GE(seen, 0);
  door::Greeting g{};
  ASSERT_TRUE(answer_challenge(seen, g));
  std::array<uint8_t, 1 + door::kProofSize> verdict{};
  ASSERT_TRUE(read_exact(seen, verdict.data(), verdict.size(), in(2000ms)).is_ok());
  ASSERT_EQ(verdict[0], door::kAccepted);
  ::close(seen);

  int listener = -1;
  uint16_t port = 0;
  ASSERT_TRUE(tcp_listen("127.0.0.1", 0, listener, port).is_ok());
  std::string after_answer;
  std::thread impostor([&] {
    int c = -1;
    if (!tcp_accept(listener, in(3000ms), c).is_ok()) return;
    (void)write_exact(c, g.data(), g.size(), in(2000ms));
    door::Answer theirs{};
    if (read_exact(c, theirs.data(), theirs.size(), in(2000ms)).is_ok())
      (void)write_exact(c, verdict.data(), verdict.size(), in(2000ms));
    (void)read_to_eof(c, after_answer, 2000ms);
    ::close(c);
  });
  int fd = -1;
  std::unique_ptr<TlsChannel> tls;
  const Status s = pass_door("127.0.0.1", port, "s3", in(3000ms), fd, tls);
  impostor.join();
  EXPECT_TRUE(has(s, Errc::auth_failed, {"does not know the secret"})) << s.to_string();
  EXPECT_EQ(fd, -1);
  EXPECT_EQ(after_answer, "") << "the client sent something past its answer to an impostor";
  ::close(listener);
}

TEST(DoorPassage, OnlyAConnectionFromThisProcessIsTaken) {
  int listener = -1;
  uint16_t port = 0;
  ASSERT_TRUE(tcp_listen("127.0.0.1", 0, listener, port).is_ok());
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // another process: connects (plain system calls only), then waits for the word to exit
    ::close(go[1]);  // so that the parent's close is the end of file
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    (void)!connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
    char x;
    (void)!read(go[0], &x, 1);
    _exit(0);
  }
  int theirs = -1;
  ASSERT_TRUE(tcp_accept(listener, in(3000ms), theirs).is_ok());
  EXPECT_FALSE(opened_by_this_process(theirs));
  int mine = -1;
  ASSERT_TRUE(tcp_connect("127.0.0.1", port, in(2000ms), mine).is_ok());
  int accepted = -1;
  ASSERT_TRUE(tcp_accept(listener, in(3000ms), accepted).is_ok());
  EXPECT_TRUE(opened_by_this_process(accepted));
  ::close(go[1]);
  int status = 0;
  waitpid(child, &status, 0);
  for (int fd : {go[0], theirs, mine, accepted, listener}) ::close(fd);
}

// Through a passage: the bytes a local client writes reach the door's inner port, and back.
TEST(DoorPassage, RelaysOneLocalConnectionThroughTheDoor) {
  Inner inner;
  Door door(options(inner.port));
  auto passage = DoorPassage::open("127.0.0.1", door->port(), "s3", in(3000ms));
  ASSERT_TRUE(passage.is_ok()) << passage.status().to_string();
  int local = -1;
  ASSERT_TRUE(tcp_connect("127.0.0.1", passage->port(), in(2000ms), local).is_ok());
  const int c = inner.next();
  ASSERT_GE(c, 0);
  ASSERT_TRUE(write_exact(local, "hello", 5, in(2000ms)).is_ok());
  char buf[5] = {};
  ASSERT_TRUE(read_exact(c, buf, 5, in(2000ms)).is_ok());
  EXPECT_EQ(std::string(buf, 5), "hello");
  // The orchestrator's end closes: so does CAF's.
  ::close(c);
  std::string got;
  EXPECT_TRUE(read_to_eof(local, got));
  ::close(local);
}

// A link through a passage with a silence limit: the local end (CAF's, played by the test) and
// the orchestrator's end at the door's inner port, each -1 where it failed; both closed at the end.
struct WatchedLink {
  Inner inner;
  Door door{options(inner.port)};
  int local = -1, orch = -1;
  explicit WatchedLink(std::chrono::milliseconds silence) {
    auto p = DoorPassage::open("127.0.0.1", door->port(), "s3", in(3000ms), silence);
    EXPECT_TRUE(p.is_ok()) << p.status().to_string();
    if (!p) return;
    passage = std::move(*p);
    EXPECT_TRUE(tcp_connect("127.0.0.1", passage.port(), in(2000ms), local).is_ok());
    if (local >= 0) orch = inner.next();
  }
  ~WatchedLink() {
    for (int fd : {local, orch})
      if (fd >= 0) ::close(fd);
  }
  // One byte from the orchestrator reaches the local end.
  bool carries(char byte) {
    char b = 0;
    return write_exact(orch, &byte, 1, in(1000ms)).is_ok() && read_exact(local, &b, 1, in(1000ms)).is_ok() &&
           b == byte;
  }
  DoorPassage passage;
};

// A passage with a silence limit keeps a link whose orchestrator keeps talking (a byte every 20
// ms for 3 limits) and closes one that falls silent: CAF then sees its connection end.
TEST(DoorPassage, ASilentOrchestratorEndsTheLinkAndATalkingOneKeepsIt) {
  WatchedLink link(500ms);
  ASSERT_GE(link.orch, 0);
  const auto talk_until = in(1500ms);
  int sent = 0;
  while (Clock::now() < talk_until) {
    ASSERT_TRUE(link.carries('x')) << "closed after " << sent << " bytes";
    ++sent;
    std::this_thread::sleep_for(20ms);  // the heartbeat's pace, not an ordering
  }
  EXPECT_GE(sent, 10);
  // Silent from now on: the local end reads the end of the connection within a few limits.
  const auto quiet = Clock::now();
  std::string got;
  EXPECT_TRUE(read_to_eof(link.local, got, 3000ms));
  EXPECT_EQ(got, "");
  EXPECT_GE(Clock::now() - quiet, 400ms);
}

// A link whose local end does not read (CAF busy) is not taken for a silent orchestrator: the
// relay's buffer toward it is full, so the relay stops reading the orchestrator and cannot hear
// it. The orchestrator writes without a pause while the local end reads nothing for three limits
// (every buffer on the way fills); then everything it wrote arrives intact and the link carries
// the next byte.
TEST(DoorPassage, AnEndThatDoesNotReadIsNotASilentOrchestrator) {
  WatchedLink link(500ms);
  ASSERT_GE(link.orch, 0);
  const int c = link.orch, local = link.local;
  constexpr std::size_t kChunk = 64 << 10;
  auto byte_at = [](uint64_t i) { return static_cast<char>(i * 131 + (i >> 16)); };
  std::atomic<bool> stop{false}, done{false};
  uint64_t total = 0;  // the writer's; read after `done`
  Status wrote;
  std::thread writer([&] {
    std::vector<char> chunk(kChunk);
    while (!stop.load()) {
      for (std::size_t i = 0; i < kChunk; ++i) chunk[i] = byte_at(total + i);
      wrote = write_exact(c, chunk.data(), kChunk, in(20000ms));
      if (!wrote.is_ok()) break;
      total += kChunk;
    }
    done.store(true);
  });
  std::this_thread::sleep_for(1500ms);  // the local end reads nothing for three limits
  stop.store(true);
  // The writer writes whole chunks: a chunk begun arrives whole, and none begins after `done`.
  std::vector<char> got(kChunk);
  uint64_t received = 0;
  bool intact = true;
  Status read;
  for (;;) {
    pollfd p{local, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) {
      if (done.load() && received == total) break;
      continue;
    }
    read = read_exact(local, got.data(), kChunk, in(5000ms));
    if (!read.is_ok()) break;
    for (std::size_t i = 0; i < kChunk; ++i) intact = intact && got[i] == byte_at(received + i);
    received += kChunk;
  }
  writer.join();
  EXPECT_TRUE(read.is_ok()) << read.to_string();
  EXPECT_TRUE(wrote.is_ok()) << wrote.to_string();
  EXPECT_EQ(received, total);
  EXPECT_GT(total, 0u);
  EXPECT_TRUE(intact);
  EXPECT_TRUE(link.carries('y'));
}

} // namespace
} // namespace chorus
