// TLS on the data connections: two TcpConnections over real loopback sockets with a forwarding
// proxy between them that records the wire (tls_harness.hpp). Frames of several sizes go both ways
// at once and must arrive intact; a distinctive plaintext must not be on the wire under TLS (and
// must be without it, the control); a byte changed on the wire breaks the connection instead of
// delivering altered data.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <memory>
#include <string>
#include <vector>

#include "tls_harness.hpp"
#include "transport/poller.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;
using namespace testing;

struct Sent {
  uint32_t slot;
  std::string bytes;  // the whole payload as the receiver must see it
};

// Sends the same mix of frames both ways at once through two Connections and checks that every
// frame arrives intact; returns the bytes recorded on the wire (both directions).
std::string exchange(bool tls) {
  std::shared_ptr<TlsContext> ca, cb;
  if (tls) {
    ca = Certs::get().context("a", "ca");
    cb = Certs::get().context("b", "ca");
  }
  const auto deadline = Clock::now() + 20s;
  Pair p = connect_pair(ca, cb, deadline);
  EXPECT_TRUE(p.client_status.is_ok()) << p.client_status.to_string();
  EXPECT_TRUE(p.server_status.is_ok()) << p.server_status.to_string();
  if (tls && (!p.client_tls || !p.server_tls)) return {};
  // Small send buffers, so that the first frame below (small enough to be written by the posting
  // thread) does not fit: the writer thread must finish what that thread could not write.
  for (int fd : {p.client, p.server}) {
    int bytes = 16 << 10;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  }
  std::vector<std::string> keep;  // payloads posted by pointer: they outlive the connections
  keep.reserve(16);
  Sink sink_a, sink_b;
  auto a = std::make_unique<TcpConnection>(p.client, 1, &sink_a, std::move(p.client_tls));
  auto b = std::make_unique<TcpConnection>(p.server, 0, &sink_b, std::move(p.server_tls));
  Poller poll_a, poll_b;  // read the connections (nobody waits through them here: their background threads do)
  poll_a.start({a.get()});
  poll_b.start({b.get()});

  // Per direction: 200 KiB (an inline send cut short), 0 bytes, 1 KiB of markers, 5 MiB + 3 bytes (the writer thread), a message with
  // a prefix, a frame behind a preamble frame, and many small inline frames.
  std::vector<std::vector<Sent>> sent(2);
  std::vector<std::vector<std::shared_ptr<SendTicket>>> tickets(2);
  for (int dir = 0; dir < 2; ++dir) {
    TcpConnection& c = dir == 0 ? *a : *b;
    auto& out = sent[dir];
    auto& tk = tickets[dir];
    const uint32_t seed = 100 * dir;
    FrameHeader h;
    h.type = FrameType::data;
    h.slot = 6;
    tk.push_back(c.send(SendTicket::owning(h, pattern(200 << 10, seed + 6))));
    out.push_back({6, pattern(200 << 10, seed + 6)});
    h.slot = 0;
    tk.push_back(c.send(SendTicket::owning(h, {})));
    out.push_back({0, {}});
    h.slot = 1;
    tk.push_back(c.send(SendTicket::owning(h, repeated_marker(1024))));
    out.push_back({1, repeated_marker(1024)});
    keep.push_back(pattern((5u << 20) + 3, seed + 2));
    h.slot = 2;
    h.bytes = keep.back().size();
    tk.push_back(c.send(SendTicket::of(h, reinterpret_cast<const std::byte*>(keep.back().data()))));
    out.push_back({2, keep.back()});
    keep.push_back(pattern(100 << 10, seed + 3));
    h.slot = 3;
    tk.push_back(c.send(SendTicket::prefixed(h, kMarker + "prefix", reinterpret_cast<const std::byte*>(keep.back().data()),
                                 keep.back().size())));
    out.push_back({3, kMarker + "prefix" + keep.back()});
    FrameHeader inner;
    inner.type = FrameType::data;
    inner.slot = 4;
    inner.bytes = 10;
    std::string preamble(reinterpret_cast<const char*>(&inner), sizeof inner);
    preamble += "0123456789";
    out.push_back({4, "0123456789"});
    keep.push_back(pattern(2 << 20, seed + 5));
    h.slot = 5;
    h.bytes = keep.back().size();
    tk.push_back(c.send(SendTicket::after(preamble, h, reinterpret_cast<const std::byte*>(keep.back().data()))));
    out.push_back({5, keep.back()});
    for (uint32_t i = 0; i < 200; ++i) {
      h.slot = 10 + i;
      std::string small = pattern(1 + (i * 37) % 300, seed + 10 + i);
      tk.push_back(c.send(SendTicket::owning(h, small)));
      out.push_back({h.slot, small});
    }
  }
  EXPECT_TRUE(sink_b.wait_frames(sent[0].size(), 20s)) << "a -> b: not every frame arrived";
  EXPECT_TRUE(sink_a.wait_frames(sent[1].size(), 20s)) << "b -> a: not every frame arrived";
  for (auto& tk : tickets)
    for (auto& t : tk) EXPECT_TRUE(t->done.wait_at_least(1, Clock::now() + 5s) && t->done.value.load() == 1);
  for (int dir = 0; dir < 2; ++dir) {
    auto got = (dir == 0 ? sink_b : sink_a).frames();
    EXPECT_EQ(got.size(), sent[dir].size());
    for (const auto& s : sent[dir]) {
      auto it = got.find(s.slot);
      if (it == got.end()) {
        ADD_FAILURE() << "direction " << dir << " slot " << s.slot << " never arrived";
        continue;
      }
      EXPECT_TRUE(it->second.complete);
      EXPECT_FALSE(it->second.failed);
      EXPECT_EQ(it->second.h.bytes, s.bytes.size()) << "direction " << dir << " slot " << s.slot;
      if (it->second.h.bytes != s.bytes.size()) continue;
      EXPECT_TRUE(bytes_of(it->second.data, s.bytes.size()) == s.bytes)
          << "direction " << dir << " slot " << s.slot << ": the payload differs";
    }
  }
  // An orderly end: the bye frame travels through TLS as well.
  a->close();
  EXPECT_TRUE(sink_b.wait_closed(5s));
  EXPECT_TRUE(sink_b.orderly()) << sink_b.why();
  b->close();
  poll_a.stop();  // nothing pumps the connections once they go
  poll_b.stop();
  a.reset();
  b.reset();
  std::string wire = p.proxy->wire(0) + p.proxy->wire(1);
  EXPECT_GT(wire.size(), 2 * ((7u << 20) + (100u << 10)));  // everything went through the proxy
  return wire;
}

TEST(TlsTransport, FramesArriveIntactAndTheWireCarriesNoPlaintext) {
  NEED_CERTS();
  const std::string wire = exchange(true);
  ASSERT_FALSE(wire.empty());
  EXPECT_EQ(wire.find(kMarker), std::string::npos) << "the plaintext marker is on the wire under TLS";
  EXPECT_EQ(wire.find("0123456789"), std::string::npos);
}

TEST(TlsTransport, WithoutTlsThePlaintextIsOnTheWire) {  // the control: the check above can fail
  const std::string wire = exchange(false);
  EXPECT_NE(wire.find(kMarker), std::string::npos);
  EXPECT_NE(wire.find(repeated_marker(1024)), std::string::npos);
}


TEST(TlsTransport, AlteredByteOnTheWireBreaksTheConnection) {
  NEED_CERTS();
  auto ca = Certs::get().context("a", "ca");
  auto cb = Certs::get().context("b", "ca");
  Pair p = connect_pair(ca, cb, Clock::now() + 10s);
  ASSERT_TRUE(p.client_tls && p.server_tls) << p.client_status.to_string() << " / " << p.server_status.to_string();
  p.proxy->corrupt_at = p.proxy->forwarded(0) + 5000;  // inside the first record of the frame below
  const std::string data = pattern(1 << 20, 7);  // outlives the connections that send from it
  Sink sink_a, sink_b;
  TcpConnection a(p.client, 1, &sink_a, std::move(p.client_tls));
  TcpConnection b(p.server, 0, &sink_b, std::move(p.server_tls));
  Poller poll_a, poll_b;
  poll_a.start({&a});
  poll_b.start({&b});
  FrameHeader h;
  h.slot = 9;
  h.bytes = data.size();
  a.send(SendTicket::of(h, reinterpret_cast<const std::byte*>(data.data())));
  ASSERT_TRUE(sink_b.wait_closed(10s));
  EXPECT_FALSE(sink_b.orderly());
  EXPECT_NE(sink_b.why().find("TLS"), std::string::npos) << sink_b.why();
  auto frames = sink_b.frames();
  EXPECT_FALSE(frames.count(9) && frames[9].complete) << "altered data was delivered as complete";
}

} // namespace
} // namespace chorus
