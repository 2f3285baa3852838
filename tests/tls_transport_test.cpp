// TLS on the data connections (transport/tls/, transport/tcp/): two TcpConnections over real
// loopback sockets with a forwarding proxy between them that records the wire. Frames of several
// sizes go both ways at once and must arrive intact; a distinctive plaintext must not be on the
// wire under TLS (and must be without it, the control). Handshakes against a certificate from
// another CA, a plain peer and a silent peer fail with an error within the deadline, and a byte
// changed on the wire breaks the connection instead of delivering altered data.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "transport/socket.hpp"
#include "transport/tcp/tcp_connection.hpp"
#include "transport/poller.hpp"
#include "transport/tls/tls_channel.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;

const std::string kMarker = "CHORUS-PLAINTEXT-MARKER-7f3a9c";

// A CA, another CA, two node certificates from the first and a stranger's from the second.
class Certs {
 public:
  static Certs& get() {
    static Certs c;
    return c;
  }
  bool ok = false;
  std::string dir;
  std::string pem(const std::string& n) const { return dir + "/" + n + ".pem"; }
  std::string key(const std::string& n) const { return dir + "/" + n + ".key"; }
  std::shared_ptr<TlsContext> context(const std::string& who, const std::string& ca) const {
    auto r = TlsContext::load(pem(who), key(who), pem(ca));
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return r.is_ok() ? *r : nullptr;
  }

 private:
  Certs() {
    if (std::system("command -v openssl >/dev/null 2>&1") != 0) return;
    char tmpl[] = "/tmp/chorus-tls-unit-XXXXXX";
    if (!mkdtemp(tmpl)) return;
    dir = tmpl;
    auto make_ca = [&](const std::string& n) {
      return "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=" + n + " -keyout " + key(n) + " -out " + pem(n);
    };
    auto make_cert = [&](const std::string& n, const std::string& ca) {
      return "openssl req -newkey rsa:2048 -nodes -subj /CN=" + n + " -keyout " + key(n) + " -out " + dir + "/" + n +
             ".csr && openssl x509 -req -days 2 -in " + dir + "/" + n + ".csr -CA " + pem(ca) + " -CAkey " + key(ca) +
             " -CAcreateserial -out " + pem(n);
    };
    const std::string script = make_ca("ca") + " && " + make_ca("otherca") + " && " + make_cert("a", "ca") + " && " +
                               make_cert("b", "ca") + " && " + make_cert("stranger", "otherca");
    ok = std::system(("(" + script + ") >/dev/null 2>&1").c_str()) == 0;
  }
  ~Certs() {
    if (!dir.empty()) std::system(("rm -rf " + dir).c_str());
  }
};

#define NEED_CERTS()                                                                       \
  if (std::system("command -v openssl >/dev/null 2>&1") != 0)                              \
    GTEST_SKIP() << "no openssl command to make certificates";                             \
  ASSERT_TRUE(Certs::get().ok) << "making the test certificates with openssl failed"

// Forwards one connection to 127.0.0.1:target and records every byte in both directions.
// `corrupt_at`: flips the byte at that offset of the client-to-server stream (none by default).
class Proxy {
 public:
  explicit Proxy(uint16_t target) {
    EXPECT_TRUE(tcp_listen("127.0.0.1", 0, listen_fd_, port_).is_ok());
    acceptor_ = std::thread([this, target] {
      const auto deadline = Clock::now() + 10s;
      int c = -1, s = -1;
      if (!tcp_accept(listen_fd_, deadline, c).is_ok()) return;
      client_ = c;
      if (!tcp_connect("127.0.0.1", target, deadline, s).is_ok()) return;
      server_ = s;
      up_ = std::thread([this] { pump(client_, server_, 0); });
      pump(server_, client_, 1);
      up_.join();
    });
  }
  ~Proxy() {
    if (client_ >= 0) shutdown(client_, SHUT_RDWR);
    if (server_ >= 0) shutdown(server_, SHUT_RDWR);
    acceptor_.join();
    for (int fd : {listen_fd_, client_.load(), server_.load()})
      if (fd >= 0) ::close(fd);
  }
  uint16_t port() const { return port_; }
  std::string wire(int dir) {
    std::lock_guard<std::mutex> lk(mu_);
    return wire_[dir];
  }
  std::size_t forwarded(int dir) {
    std::lock_guard<std::mutex> lk(mu_);
    return wire_[dir].size();
  }
  std::atomic<std::size_t> corrupt_at{std::size_t(-1)};

 private:
  void pump(int from, int to, int dir) {
    std::vector<char> buf(64 << 10);
    for (;;) {
      ssize_t r = recv(from, buf.data(), buf.size(), 0);
      if (r <= 0) break;
      std::size_t at;
      {
        std::lock_guard<std::mutex> lk(mu_);
        at = wire_[dir].size();
        wire_[dir].append(buf.data(), static_cast<std::size_t>(r));
      }
      const std::size_t c = corrupt_at.load();
      if (dir == 0 && c >= at && c < at + static_cast<std::size_t>(r)) buf[c - at] ^= 0x01;
      if (send(to, buf.data(), static_cast<std::size_t>(r), MSG_NOSIGNAL) != r) break;
    }
    shutdown(to, SHUT_WR);
  }
  int listen_fd_ = -1;
  std::atomic<int> client_{-1}, server_{-1};
  uint16_t port_ = 0;
  std::thread acceptor_, up_;
  std::mutex mu_;
  std::string wire_[2];  // 0: client to server, 1: server to client
};

// Collects every frame by slot.
class Sink : public FrameSink {
 public:
  struct Frame {
    FrameHeader h;
    std::vector<std::byte> data;
    bool complete = false, failed = false;
  };
  std::byte* begin_frame(uint32_t, const FrameHeader& h) override {
    std::lock_guard<std::mutex> lk(mu_);
    Frame& f = frames_[h.slot];
    f.h = h;
    f.data.assign(std::max<std::size_t>(h.bytes, 1), std::byte{0});  // never null: 0 bytes is a frame too
    return f.data.data();
  }
  void progress(uint32_t, const FrameHeader& h, std::size_t got) override {
    if (got != h.bytes) return;
    std::lock_guard<std::mutex> lk(mu_);
    frames_[h.slot].complete = true;
    ++complete_;
    cv_.notify_all();
  }
  void frame_failed(uint32_t, const FrameHeader& h) override {
    std::lock_guard<std::mutex> lk(mu_);
    frames_[h.slot].failed = true;
  }
  void closed(uint32_t, bool orderly, const std::string& why) override {
    std::lock_guard<std::mutex> lk(mu_);
    closed_ = true;
    orderly_ = orderly;
    why_ = why;
    cv_.notify_all();
  }
  bool wait_frames(std::size_t n, std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, limit, [&] { return complete_ >= n; });
  }
  bool wait_closed(std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, limit, [&] { return closed_; });
  }
  std::map<uint32_t, Frame> frames() {
    std::lock_guard<std::mutex> lk(mu_);
    return frames_;
  }
  bool orderly() {
    std::lock_guard<std::mutex> lk(mu_);
    return orderly_;
  }
  std::string why() {
    std::lock_guard<std::mutex> lk(mu_);
    return why_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint32_t, Frame> frames_;
  std::size_t complete_ = 0;
  bool closed_ = false, orderly_ = false;
  std::string why_;
};

// Pseudo-random bytes (so that a lost, repeated or reordered piece shows) with the marker planted
// every 64 KiB.
std::string pattern(std::size_t n, uint32_t seed) {
  std::string s(n, '\0');
  std::mt19937 rng(seed);
  for (auto& c : s) c = static_cast<char>(rng());
  for (std::size_t at = 0; at + kMarker.size() <= n; at += 64 << 10) s.replace(at, kMarker.size(), kMarker);
  return s;
}

std::string repeated_marker(std::size_t n) {
  std::string s;
  while (s.size() < n) s += kMarker;
  s.resize(n);
  return s;
}

std::string bytes_of(const std::vector<std::byte>& v, std::size_t n) {
  return std::string(reinterpret_cast<const char*>(v.data()), n);
}

// A connected pair through a proxy: `client` (connected to the proxy) and `server` (accepted),
// after the TLS handshake on each side that has a context; a side without one runs `plain` on its
// socket meanwhile (if given).
struct Pair {
  std::unique_ptr<Proxy> proxy;
  int client = -1, server = -1;
  std::unique_ptr<TlsChannel> client_tls, server_tls;
  Status client_status, server_status;
  Clock::duration client_took{}, server_took{};
};

Pair connect_pair(const std::shared_ptr<TlsContext>& client_ctx, const std::shared_ptr<TlsContext>& server_ctx,
                  Clock::time_point deadline, std::function<void(int)> plain = {}) {
  Pair p;
  int lfd = -1;
  uint16_t port = 0;
  EXPECT_TRUE(tcp_listen("127.0.0.1", 0, lfd, port).is_ok());
  p.proxy = std::make_unique<Proxy>(port);
  EXPECT_TRUE(tcp_connect("127.0.0.1", p.proxy->port(), deadline, p.client).is_ok());
  EXPECT_TRUE(tcp_accept(lfd, deadline, p.server).is_ok());
  ::close(lfd);
  auto side = [&](const std::shared_ptr<TlsContext>& ctx, bool server) {
    const int fd = server ? p.server : p.client;
    if (!ctx) {
      if (plain) plain(fd);
      return;
    }
    const auto t0 = Clock::now();
    auto r = TlsChannel::handshake(*ctx, fd, server, deadline);
    (server ? p.server_took : p.client_took) = Clock::now() - t0;
    (server ? p.server_status : p.client_status) = r.status();
    if (r) (server ? p.server_tls : p.client_tls) = std::move(*r);
  };
  std::thread server_side([&] { side(server_ctx, true); });
  side(client_ctx, false);
  server_side.join();
  return p;
}

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

TEST(TlsTransport, CertificateFromAnotherCaFailsWithinTheDeadline) {
  NEED_CERTS();
  auto good = Certs::get().context("b", "ca");
  auto stranger = Certs::get().context("stranger", "otherca");
  const auto t0 = Clock::now();
  Pair p = connect_pair(stranger, good, t0 + 10s);
  EXPECT_LT(Clock::now() - t0, 5s);
  EXPECT_EQ(p.client_status.code(), Errc::auth_failed) << p.client_status.to_string();
  EXPECT_NE(p.client_status.message().find("certificate verify failed"), std::string::npos)
      << p.client_status.message();
  EXPECT_EQ(p.server_status.code(), Errc::auth_failed) << p.server_status.to_string();
  EXPECT_EQ(p.client_tls, nullptr);
  EXPECT_EQ(p.server_tls, nullptr);
  ::close(p.client);
  ::close(p.server);
}

// A stranger that trusts our CA but holds a certificate from another one: under TLS 1.3 its own
// handshake completes, and it learns of the refusal from our alert at its first read.
TEST(TlsTransport, RefusedClientCertificateShowsAtTheFirstRead) {
  NEED_CERTS();
  auto good = Certs::get().context("b", "ca");
  auto stranger = Certs::get().context("stranger", "ca");
  ASSERT_NE(stranger, nullptr);
  const auto t0 = Clock::now();
  Pair p = connect_pair(stranger, good, t0 + 10s);
  EXPECT_EQ(p.server_status.code(), Errc::auth_failed) << p.server_status.to_string();
  EXPECT_NE(p.server_status.message().find("certificate verify failed"), std::string::npos)
      << p.server_status.message();
  ::close(p.server);
  if (p.client_tls) {
    char c;
    Status s = p.client_tls->read_exact(p.client, &c, 1, t0 + 10s);
    EXPECT_EQ(s.code(), Errc::auth_failed) << s.to_string();
    EXPECT_NE(s.message().find("alert"), std::string::npos) << s.message();
  } else {
    EXPECT_EQ(p.client_status.code(), Errc::auth_failed) << p.client_status.to_string();
  }
  EXPECT_LT(Clock::now() - t0, 5s);
  ::close(p.client);
}

TEST(TlsTransport, PlainPeerFails) {
  NEED_CERTS();
  auto ctx = Certs::get().context("a", "ca");
  // A plain node: it sends its hello frame, reads the other's header (garbage here) and hangs up.
  auto plain_node = [](int fd) {
    FrameHeader h;
    h.type = FrameType::hello;
    h.bytes = 40;
    std::string hello(reinterpret_cast<const char*>(&h), sizeof h);
    hello += std::string(40, 'x');
    (void)write_exact(fd, hello.data(), hello.size(), Clock::now() + 5s);
    (void)read_exact(fd, &h, sizeof h, Clock::now() + 2s);
    shutdown(fd, SHUT_RDWR);
  };
  for (bool tls_is_server : {false, true}) {
    const auto deadline = Clock::now() + 10s;
    Pair p = tls_is_server ? connect_pair(nullptr, ctx, deadline, plain_node)
                           : connect_pair(ctx, nullptr, deadline, plain_node);
    const Status& s = tls_is_server ? p.server_status : p.client_status;
    EXPECT_EQ(s.code(), Errc::auth_failed) << (tls_is_server ? "server: " : "client: ") << s.to_string();
    EXPECT_LT(tls_is_server ? p.server_took : p.client_took, 5s) << s.to_string();
    EXPECT_EQ(tls_is_server ? p.server_tls : p.client_tls, nullptr);
    ::close(p.client);
    ::close(p.server);
  }
}

TEST(TlsTransport, SilentPeerTimesOut) {
  NEED_CERTS();
  auto ctx = Certs::get().context("a", "ca");
  const auto t0 = Clock::now();
  Pair p = connect_pair(ctx, nullptr, t0 + 400ms);  // the server side never answers
  const auto took = Clock::now() - t0;
  EXPECT_EQ(p.client_status.code(), Errc::timeout) << p.client_status.to_string();
  EXPECT_GE(took, 350ms);
  EXPECT_LT(took, 3s);
  ::close(p.client);
  ::close(p.server);
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

TEST(TlsTransport, MissingFileIsAConfigError) {
  NEED_CERTS();
  auto r = TlsContext::load(Certs::get().pem("a"), "/nonexistent/a.key", Certs::get().pem("ca"));
  EXPECT_EQ(r.status().code(), Errc::invalid_config);
  EXPECT_NE(r.status().message().find("/nonexistent/a.key"), std::string::npos) << r.status().message();
  auto mismatched = TlsContext::load(Certs::get().pem("a"), Certs::get().key("b"), Certs::get().pem("ca"));
  EXPECT_EQ(mismatched.status().code(), Errc::invalid_config) << mismatched.status().to_string();
}

} // namespace
} // namespace chorus
