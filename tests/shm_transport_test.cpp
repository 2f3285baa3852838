// The shared-memory path between two processes of one host (transport/shm/), here within one
// process over a socket pair: the segment is offered and attached as between processes (through
// /proc/PID/fd), frames of every size go both ways at once through rings far smaller than the
// largest frame and arrive intact; a wrong collective or token is declined and the socket carries
// the bytes; the other side's end (orderly or not) reaches the reader; once agreed the segment is
// mapped but open nowhere; nothing is left in /dev/shm.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tls_harness.hpp"
#include "transport/poller.hpp"
#include "transport/shm/shm_channel.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;
using namespace testing;

// Small rings (64 KiB), so that large frames wrap them many times and writers wait for room:
// set before the suite's first case, not at the program's start, since one program may hold
// every suite (chorus-suites).
class ShmTransport : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { setenv("CHORUS_SHM_RING_KIB", "64", 1); }
  static void TearDownTestSuite() { unsetenv("CHORUS_SHM_RING_KIB"); }
};

std::set<std::string> dev_shm() {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) names.insert(e.path().filename());
  return names;
}

// Descriptors of this process open on a chorus segment (it is mapped, not open, once agreed).
int open_segments() {
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    std::error_code rc;
    const auto target = std::filesystem::read_symlink(e.path(), rc).string();
    if (target.find("memfd:chorus-shm") != std::string::npos) ++n;
  }
  return n;
}

struct Channels {
  int a = -1, b = -1;  // a offered, b attached
  std::unique_ptr<ShmChannel> offered, attached;
  std::string declined;
};

Channels agree(uint64_t token_a, uint64_t token_b) {
  Channels c;
  int sv[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  c.a = sv[0];
  c.b = sv[1];
  const auto deadline = Clock::now() + 10s;
  std::thread offerer([&] {
    auto r = ShmChannel::offer(c.a, nullptr, 7, token_a, deadline);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    if (r) c.offered = std::move(*r);
  });
  auto r = ShmChannel::accept(c.b, nullptr, 7, token_b, deadline, c.declined);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  if (r) c.attached = std::move(*r);
  offerer.join();
  return c;
}

// Two connections over one agreed segment: `a` offered it, `b` attached; each has its sink.
struct ConnectedPair {
  Sink sink_a, sink_b;
  std::unique_ptr<Connection> a, b;
  std::string declined;
  explicit ConnectedPair(uint64_t token) {
    Channels ch = agree(token, token);
    declined = ch.declined;
    if (!ch.offered || !ch.attached) return;
    a = shm_connection(ch.a, 1, &sink_a, std::move(ch.offered));
    b = shm_connection(ch.b, 0, &sink_b, std::move(ch.attached));
  }
};

TEST_F(ShmTransport, FramesOfEverySizeGoBothWaysIntact) {
  const auto before = dev_shm();
  EXPECT_EQ(ShmChannel::ring_bytes(), std::size_t{64} << 10);
  ConnectedPair pair(42);
  ASSERT_TRUE(pair.a && pair.b) << pair.declined;
  EXPECT_EQ(open_segments(), 0) << "once both sides mapped it, nobody else may open the segment";
  auto& [sink_a, sink_b, a, b, declined] = pair;
  Poller poll_a, poll_b;
  poll_a.start({a.get()});
  poll_b.start({b.get()});
  std::vector<std::string> keep;
  keep.reserve(8);
  std::vector<std::vector<std::pair<uint32_t, std::string>>> sent(2);
  std::vector<std::shared_ptr<SendTicket>> tickets;
  for (int dir = 0; dir < 2; ++dir) {
    Connection& c = dir == 0 ? *a : *b;
    const uint32_t seed = 100 * dir;
    FrameHeader h;
    h.type = FrameType::data;
    h.slot = 0;
    tickets.push_back(c.send(SendTicket::owning(h, {})));
    sent[dir].push_back({0, {}});
    keep.push_back(pattern((3u << 20) + 5, seed + 1));  // 48 times the ring
    h.slot = 1;
    h.bytes = keep.back().size();
    tickets.push_back(c.send(SendTicket::of(h, reinterpret_cast<const std::byte*>(keep.back().data()))));
    sent[dir].push_back({1, keep.back()});
    keep.push_back(pattern(100 << 10, seed + 2));
    h.slot = 2;
    tickets.push_back(c.send(SendTicket::prefixed(h, "prefix", reinterpret_cast<const std::byte*>(keep.back().data()),
                                                  keep.back().size())));
    sent[dir].push_back({2, "prefix" + keep.back()});
    for (uint32_t i = 0; i < 300; ++i) {
      h.slot = 10 + i;
      std::string small = pattern(1 + (i * 37) % 1500, seed + 10 + i);
      tickets.push_back(c.send(SendTicket::owning(h, small)));
      sent[dir].push_back({h.slot, small});
    }
  }
  EXPECT_TRUE(sink_b.wait_frames(sent[0].size(), 20s)) << "a -> b: not every frame arrived";
  EXPECT_TRUE(sink_a.wait_frames(sent[1].size(), 20s)) << "b -> a: not every frame arrived";
  for (auto& t : tickets) EXPECT_TRUE(t->done.wait_at_least(1, Clock::now() + 5s) && t->done.value.load() == 1);
  for (int dir = 0; dir < 2; ++dir) {
    auto got = (dir == 0 ? sink_b : sink_a).frames();
    EXPECT_EQ(got.size(), sent[dir].size());
    for (const auto& [slot, bytes] : sent[dir]) {
      auto it = got.find(slot);
      ASSERT_NE(it, got.end()) << "direction " << dir << " slot " << slot;
      EXPECT_TRUE(it->second.complete && !it->second.failed);
      ASSERT_EQ(it->second.h.bytes, bytes.size()) << "direction " << dir << " slot " << slot;
      EXPECT_TRUE(bytes_of(it->second.data, bytes.size()) == bytes) << "direction " << dir << " slot " << slot;
    }
  }
  // An orderly close reaches the other side as such.
  a->close();
  EXPECT_TRUE(sink_b.wait_closed(5s));
  EXPECT_TRUE(sink_b.orderly());
  poll_a.stop();
  poll_b.stop();
  EXPECT_EQ(dev_shm(), before) << "a segment was left in /dev/shm";
}

// A small data frame of membership epoch `epoch` (FrameHeader::magic_of) in slot `slot`.
std::shared_ptr<SendTicket> epoch_frame(uint32_t epoch, uint32_t slot, std::string text) {
  FrameHeader h;
  h.magic = FrameHeader::magic_of(epoch);
  h.type = FrameType::data;
  h.slot = slot;
  return SendTicket::owning(h, std::move(text));
}

// A data frame of epoch 0 in slot `slot` whose payload is `bytes` itself (not copied: it must
// stay until the frame has left).
std::shared_ptr<SendTicket> frame_of(uint32_t slot, const std::string& bytes) {
  FrameHeader h;
  h.type = FrameType::data;
  h.slot = slot;
  h.bytes = bytes.size();
  return SendTicket::of(h, reinterpret_cast<const std::byte*>(bytes.data()));
}

// A link kept into the next membership epoch (a shrink): rehomed while nobody reads it, it names
// the other node by its new id and hands its new sink only frames stamped with the new epoch; an
// old epoch's frame half read is dropped (its old sink told), and so is one still on the way.
TEST_F(ShmTransport, AKeptLinkHandsOnOnlyTheNewEpochsFrames) {
  ConnectedPair pair(11);
  ASSERT_TRUE(pair.a && pair.b) << pair.declined;
  auto& [sink_a, sink_b, a, b, declined] = pair;
  a->send(epoch_frame(0, 1, "epoch 0"));
  while (sink_b.frames().size() < 1) ASSERT_NE(b->pump(), Connection::Pumped::ended);
  // A large frame of epoch 0, of which the reader takes only a piece before the epoch ends.
  const std::string big = pattern(200 << 10, 3);
  auto t2 = a->send(frame_of(2, big));
  // A budget of one header: the pump stops right after taking it, before any of the payload.
  while (sink_b.frames().count(2) == 0) ASSERT_NE(b->pump(sizeof(FrameHeader)), Connection::Pumped::ended);
  ASSERT_FALSE(sink_b.frames()[2].complete);
  Sink next;
  ASSERT_TRUE(b->rehome(5, FrameHeader::magic_of(1), &next));
  EXPECT_EQ(b->node(), 5u);
  EXPECT_TRUE(sink_b.frames()[2].failed) << "the old sink lets go of the frame it was reading";
  a->send(epoch_frame(0, 3, "epoch 0, late"));
  a->send(epoch_frame(1, 4, "epoch 1"));
  Poller poll_b;
  poll_b.start({b.get()});
  ASSERT_TRUE(next.wait_frames(1, 10s));
  EXPECT_TRUE(t2->done.wait_at_least(1, Clock::now() + 5s) && t2->done.value.load() == 1);
  const auto got = next.frames();
  ASSERT_EQ(got.size(), 1u) << "only the new epoch's frame";
  ASSERT_EQ(got.begin()->first, 4u);
  EXPECT_EQ(bytes_of(got.begin()->second.data, 7), "epoch 1");
  EXPECT_EQ(next.last_node(), 5u);
  EXPECT_EQ(sink_b.frames().size(), 2u) << "the old sink got nothing after the rehome";
  // A bye of the old epoch does not end the new one's link; the new one's does.
  FrameHeader bye;
  bye.type = FrameType::bye;
  a->send(SendTicket::owning(bye, {}));
  auto after = a->send(epoch_frame(1, 6, "after"));
  ASSERT_TRUE(next.wait_frames(2, 10s));
  ASSERT_TRUE(after->done.wait_at_least(1, Clock::now() + 5s));  // nothing of a's being written
  ASSERT_TRUE(a->rehome(0, FrameHeader::magic_of(1), &sink_a));
  a->close();
  EXPECT_TRUE(next.wait_closed(5s));
  EXPECT_TRUE(next.orderly());
  poll_b.stop();
  // An ended link cannot be kept.
  EXPECT_FALSE(b->rehome(0, FrameHeader::magic_of(2), &next));
}

// A frame of the earlier epoch whose bytes have begun cannot be taken back (its op's memory is
// read until it is out): the link is kept, and that frame is written out ahead of the new epoch's,
// which the other side reads as the earlier epoch's and drops; what was queued behind it and not
// begun is failed. So both sides of a pair keep their link whatever was under way on it.
// A pair whose `a` has begun a frame of epoch 0 that nobody reads: of three rings (small enough to
// be begun by the sending thread itself, which writes what the ring takes), it stops in its middle.
struct MidFrame {
  std::string big;  // before the pair: it outlives the connection that writes it
  ConnectedPair pair;
  std::shared_ptr<SendTicket> begun;
  MidFrame(uint64_t token, uint32_t seed) : big(pattern(192 << 10, seed)), pair(token) {
    if (pair.a && pair.b) begun = pair.a->send(frame_of(1, big));
  }
};

TEST_F(ShmTransport, AFrameBegunIsWrittenOutAheadOfTheNextEpochs) {
  MidFrame m(13, 4);
  ASSERT_TRUE(m.begun) << m.pair.declined;
  ASSERT_EQ(m.begun->done.value.load(), 0u) << "stopped in its middle";
  auto& [sink_a, sink_b, a, b, declined] = m.pair;
  auto& begun = m.begun;
  auto behind = a->send(epoch_frame(0, 2, "behind"));
  Sink next_a, next_b;
  ASSERT_TRUE(a->rehome(1, FrameHeader::magic_of(1), &next_a)) << "a frame half written keeps the link";
  EXPECT_EQ(behind->done.value.load(), 2u) << "what the old epoch queued and did not begin is failed";
  EXPECT_EQ(begun->done.value.load(), 0u) << "the begun frame is still being written";
  EXPECT_FALSE(a->abandon(*behind)) << "a ticket no longer on the link";
  auto after = a->send(epoch_frame(1, 3, "epoch 1"));
  ASSERT_TRUE(b->rehome(0, FrameHeader::magic_of(1), &next_b));
  Poller poll_b;
  poll_b.start({b.get()});
  ASSERT_TRUE(next_b.wait_frames(1, 10s));
  ASSERT_TRUE(begun->done.wait_at_least(1, Clock::now() + 10s));
  EXPECT_EQ(begun->done.value.load(), 1u) << "written out whole";
  ASSERT_TRUE(after->done.wait_at_least(1, Clock::now() + 10s));
  EXPECT_EQ(after->done.value.load(), 1u);
  const auto got = next_b.frames();
  ASSERT_EQ(got.size(), 1u) << "only the new epoch's frame reaches the new sink";
  ASSERT_EQ(got.begin()->first, 3u);
  EXPECT_EQ(bytes_of(got.begin()->second.data, 7), "epoch 1");
  EXPECT_TRUE(sink_b.frames().empty()) << "nor the old one: the frame was the old epoch's";
  // The link goes on: another frame each way.
  Poller poll_a;
  poll_a.start({a.get()});
  a->send(epoch_frame(1, 4, "again"));
  b->send(epoch_frame(1, 5, "back"));
  EXPECT_TRUE(next_b.wait_frames(2, 10s));
  EXPECT_TRUE(next_a.wait_frames(1, 10s));
  poll_a.stop();
  poll_b.stop();
}

// The old epoch's op gives up on its frame begun on a kept link (its timeout ran out: the other
// side took nothing): the link is cut, whatever epoch it serves now, so that nothing reads the
// op's memory once it returns; the new epoch's frames queued behind it fail, and the readers of
// both sides tell the new epoch's sinks the link broke. A frame only queued just leaves.
TEST_F(ShmTransport, AbandoningABegunFrameEndsTheKeptLink) {
  MidFrame m(14, 5);
  ASSERT_TRUE(m.begun) << m.pair.declined;
  ASSERT_EQ(m.begun->done.value.load(), 0u) << "stopped in its middle";
  auto& [sink_a, sink_b, a, b, declined] = m.pair;
  auto& begun = m.begun;
  Sink next_a, next_b;
  ASSERT_TRUE(a->rehome(1, FrameHeader::magic_of(1), &next_a));
  ASSERT_TRUE(b->rehome(0, FrameHeader::magic_of(1), &next_b));
  auto queued = a->send(epoch_frame(1, 2, "epoch 1"));
  auto late = a->send(epoch_frame(0, 3, "an old op's, sent after the rehome"));
  EXPECT_TRUE(a->abandon(*late));
  EXPECT_EQ(late->done.value.load(), 2u) << "taken out of the queue";
  EXPECT_EQ(queued->done.value.load(), 0u) << "the link goes on";
  EXPECT_TRUE(a->abandon(*begun));
  ASSERT_TRUE(begun->done.wait_at_least(1, Clock::now() + 10s));
  EXPECT_EQ(begun->done.value.load(), 2u) << "not all sent";
  ASSERT_TRUE(queued->done.wait_at_least(1, Clock::now() + 10s));
  EXPECT_EQ(queued->done.value.load(), 2u);
  EXPECT_FALSE(a->abandon(*begun)) << "once is enough";
  Poller poll_a, poll_b;
  poll_a.start({a.get()});
  poll_b.start({b.get()});
  ASSERT_TRUE(next_b.wait_closed(10s));
  EXPECT_TRUE(next_b.broke()) << "cut, not closed";
  EXPECT_TRUE(next_b.frames().empty());
  ASSERT_TRUE(next_a.wait_closed(10s)) << "this side's new epoch hears of it too";
  EXPECT_TRUE(next_a.broke()) << next_a.why();
  EXPECT_NE(next_a.why().find("gave up on a frame"), std::string::npos) << next_a.why();
  poll_a.stop();
  poll_b.stop();
}

// The other side is in the next epoch first: the old epoch's reader stops (parked) at its first
// frame, unread, which after the rehome is the first the new sink gets; a straggler of the old
// epoch sent after it is dropped.
TEST_F(ShmTransport, AFrameOfTheNextEpochWaitsUnreadForIt) {
  ConnectedPair pair(12);
  ASSERT_TRUE(pair.a && pair.b) << pair.declined;
  auto& [sink_a, sink_b, a, b, declined] = pair;
  a->send(epoch_frame(0, 1, "epoch 0"));
  a->send(epoch_frame(1, 2, "early"));
  Connection::Pumped r = Connection::Pumped::idle;
  const auto until = Clock::now() + 10s;
  while (r != Connection::Pumped::parked && Clock::now() < until) {
    r = b->pump();
    ASSERT_NE(r, Connection::Pumped::ended);
  }
  ASSERT_EQ(r, Connection::Pumped::parked);
  EXPECT_EQ(b->pump(), Connection::Pumped::parked) << "parked until the rehome";
  EXPECT_FALSE(b->ready());
  const auto old = sink_b.frames();
  ASSERT_EQ(old.size(), 1u);
  EXPECT_TRUE(old.begin()->second.complete);
  Sink next;
  ASSERT_TRUE(b->rehome(0, FrameHeader::magic_of(1), &next));
  a->send(epoch_frame(0, 3, "straggler"));
  a->send(epoch_frame(1, 4, "then"));
  Poller poll_b;
  poll_b.start({b.get()});
  ASSERT_TRUE(next.wait_frames(2, 10s));
  poll_b.stop();
  const auto got = next.frames();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(bytes_of(got.at(2).data, 5), "early");
  EXPECT_EQ(bytes_of(got.at(4).data, 4), "then");
  EXPECT_EQ(sink_b.frames().size(), 1u);
}

TEST_F(ShmTransport, AKilledSideEndsTheOthersReadingAndItsWaitingWriter) {
  ConnectedPair pair(5);
  ASSERT_TRUE(pair.a && pair.b) << pair.declined;
  auto& [sink_a, sink_b, a, b, declined] = pair;
  Poller poll_a;
  poll_a.start({a.get()});  // nobody reads b: a's writer fills the ring and waits for room
  std::string big = pattern(1 << 20, 3);
  FrameHeader h;
  h.slot = 1;
  h.bytes = big.size();
  auto t = a->send(SendTicket::of(h, reinterpret_cast<const std::byte*>(big.data())));
  EXPECT_FALSE(t->done.wait_at_least(1, Clock::now() + 50ms)) << "1 MiB cannot fit a 64 KiB ring unread";
  b->kill();  // the other side ends without a bye
  EXPECT_TRUE(sink_a.wait_closed(5s)) << "a's reader never heard that b ended";
  EXPECT_FALSE(sink_a.orderly());
  EXPECT_TRUE(t->done.wait_at_least(2, Clock::now() + 5s)) << "the waiting writer never let go";
  poll_a.stop();
}

// What a waiting thread looks at before it sleeps: bytes in the ring make a connection ready
// (and refuse to arm), until it ended; an ended one is never ready, or its poller would spin.
TEST_F(ShmTransport, ReadyWhileBytesWaitUntilItEnded) {
  ConnectedPair pair(9);
  ASSERT_TRUE(pair.a && pair.b) << pair.declined;
  auto& [sink_a, sink_b, a, b, declined] = pair;
  EXPECT_FALSE(b->ready());
  EXPECT_TRUE(b->arm()) << "nothing there: b may sleep";
  FrameHeader h;
  h.slot = 1;
  auto t = a->send(SendTicket::owning(h, "twelve bytes"));
  ASSERT_TRUE(t->done.wait_at_least(1, Clock::now() + 5s));
  EXPECT_TRUE(b->ready());
  EXPECT_FALSE(b->arm()) << "bytes came: b must read instead of sleeping";
  EXPECT_EQ(b->pump(), Connection::Pumped::idle);
  EXPECT_TRUE(sink_b.wait_frames(1, 5s));
  EXPECT_FALSE(b->ready());
  b->kill();
  EXPECT_EQ(b->pump(), Connection::Pumped::ended);
  auto late = a->send(SendTicket::owning(h, "more"));  // a does not know yet: into b's ring
  ASSERT_TRUE(late->done.wait_at_least(1, Clock::now() + 5s));
  EXPECT_FALSE(b->ready()) << "ended, though its ring holds a frame";
  EXPECT_TRUE(b->arm()) << "an ended connection never asks its poller to pump it again";
}

// An offer whose pid and descriptor name something else (what /proc/PID/fd/N is in another PID
// namespace): an empty file, then a file of the offered size. Declined without touching it (no
// SIGBUS), the socket left as it was.
TEST_F(ShmTransport, AnOfferNamingAnotherFileIsDeclined) {
  for (off_t size : {off_t{0}, off_t{1} << 20}) {
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    FILE* other = std::tmpfile();
    ASSERT_NE(other, nullptr);
    ASSERT_EQ(ftruncate(fileno(other), size), 0);
    SharedSegment::Offer o;
    o.pid = getpid();
    o.fd = fileno(other);
    o.bytes = std::uint64_t{1} << 20;
    o.dev = 1;
    o.inode = 2;
    ASSERT_EQ(::send(sv[0], &o, sizeof o, 0), static_cast<ssize_t>(sizeof o));
    std::string why;
    auto r = ShmChannel::accept(sv[1], nullptr, 7, 7, Clock::now() + 5s, why);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_FALSE(*r);
    EXPECT_NE(why.find("is not the segment offered"), std::string::npos) << why;
    char answer = 1;
    ASSERT_EQ(::recv(sv[0], &answer, 1, 0), 1);
    EXPECT_EQ(answer, 0) << "declined on the socket too";
    std::fclose(other);
    ::close(sv[0]);
    ::close(sv[1]);
  }
}

TEST_F(ShmTransport, AWrongTokenIsDeclinedAndTheSocketStillWorks) {
  Channels ch = agree(1, 2);
  EXPECT_FALSE(ch.offered);
  EXPECT_FALSE(ch.attached);
  EXPECT_NE(ch.declined.find("not this collective's"), std::string::npos) << ch.declined;
  // Both sides go on over the socket.
  const char ping[] = "ping";
  ASSERT_EQ(::send(ch.a, ping, 4, 0), 4);
  char got[4];
  ASSERT_EQ(::recv(ch.b, got, 4, MSG_WAITALL), 4);
  EXPECT_EQ(std::string(got, 4), "ping");
  ::close(ch.a);
  ::close(ch.b);
}

} // namespace
} // namespace chorus
