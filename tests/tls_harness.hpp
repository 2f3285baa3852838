// The harness of the TLS transport tests (transport/tls/, transport/tcp/): test certificates made
// with openssl (two CAs, two node certificates and a stranger's), a forwarding proxy that records
// the wire and can flip a byte on it, a frame sink that collects what arrives, distinctive
// payloads, and a pair of connected sockets through the proxy after the TLS handshakes.
#pragma once
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
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "transport/socket.hpp"
#include "transport/tcp/tcp_connection.hpp"
#include "transport/tls/tls_channel.hpp"

namespace chorus::testing {

using namespace std::chrono_literals;

inline const std::string kMarker = "CHORUS-PLAINTEXT-MARKER-7f3a9c";

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
  std::byte* begin_frame(uint32_t node, const FrameHeader& h) override {
    std::lock_guard<std::mutex> lk(mu_);
    last_node_ = node;
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
  void broken(uint32_t node, const std::string& why) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      broke_ = true;
    }
    closed(node, false, why);
  }
  bool broke() {  // told the link broke (FrameSink::broken), not that it ended
    std::lock_guard<std::mutex> lk(mu_);
    return broke_;
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
  uint32_t last_node() {  // the node the connection named for its last frame
    std::lock_guard<std::mutex> lk(mu_);
    return last_node_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint32_t, Frame> frames_;
  std::size_t complete_ = 0;
  bool closed_ = false, orderly_ = false, broke_ = false;
  std::string why_;
  uint32_t last_node_ = 0;
};

// Pseudo-random bytes (so that a lost, repeated or reordered piece shows) with the marker planted
// every 64 KiB.
inline std::string pattern(std::size_t n, uint32_t seed) {
  std::string s(n, '\0');
  std::mt19937 rng(seed);
  for (auto& c : s) c = static_cast<char>(rng());
  for (std::size_t at = 0; at + kMarker.size() <= n; at += 64 << 10) s.replace(at, kMarker.size(), kMarker);
  return s;
}

inline std::string repeated_marker(std::size_t n) {
  std::string s;
  while (s.size() < n) s += kMarker;
  s.resize(n);
  return s;
}

inline std::string bytes_of(const std::vector<std::byte>& v, std::size_t n) {
  return std::string(reinterpret_cast<const char*>(v.data()), n);
}

// A connected pair through a proxy: `client` (connected to the proxy) and `server` (accepted),
// after the TLS handshake on each side that has a context (with a TlsContext::psk() context, the
// side's key from `client_psk`/`server_psk`); a side without one runs `plain` on its socket
// meanwhile (if given).
struct Pair {
  std::unique_ptr<Proxy> proxy;
  int client = -1, server = -1;
  std::unique_ptr<TlsChannel> client_tls, server_tls;
  Status client_status, server_status;
  Clock::duration client_took{}, server_took{};
};

inline Pair connect_pair(const std::shared_ptr<TlsContext>& client_ctx, const std::shared_ptr<TlsContext>& server_ctx,
                  Clock::time_point deadline, std::function<void(int)> plain = {}, const std::string& client_psk = {},
                  const std::string& server_psk = {}) {
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
    auto r = TlsChannel::handshake(*ctx, fd, server, deadline, server ? server_psk : client_psk);
    (server ? p.server_took : p.client_took) = Clock::now() - t0;
    (server ? p.server_status : p.client_status) = r.status();
    if (r) (server ? p.server_tls : p.client_tls) = std::move(*r);
  };
  std::thread server_side([&] { side(server_ctx, true); });
  side(client_ctx, false);
  server_side.join();
  return p;
}

} // namespace chorus::testing
