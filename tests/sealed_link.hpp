// A test's client past the front door: the socket and, behind a sealed door, the TLS channel
// every byte on it must go through (transport/door_passage.hpp's pass_door). Plain when the door
// does not seal.
#pragma once
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <memory>
#include <string>

#include "transport/door_passage.hpp"
#include "transport/tls/tls_channel.hpp"

namespace chorus::testing {

struct SealedLink {
  int fd = -1;
  std::unique_ptr<TlsChannel> tls;

  SealedLink() = default;
  SealedLink(SealedLink&& o) noexcept : fd(o.fd), tls(std::move(o.tls)) { o.fd = -1; }
  SealedLink& operator=(SealedLink&& o) noexcept {
    std::swap(fd, o.fd);
    std::swap(tls, o.tls);
    return *this;
  }
  ~SealedLink() {
    if (fd >= 0) ::close(fd);
  }
  explicit operator bool() const { return fd >= 0; }

  // Sends all of `bytes` (encrypted on a sealed link); false once the other side closed.
  bool send_all(const std::string& bytes) {
    std::string wire, why;
    if (!tls) wire = bytes;
    else if (!tls->encrypt(bytes.data(), bytes.size(), wire, why)) return false;
    for (std::size_t sent = 0; sent < wire.size();) {
      const ssize_t n = ::send(fd, wire.data() + sent, wire.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<std::size_t>(n);
    }
    return true;
  }

  Status read_exact(void* p, std::size_t n, std::chrono::steady_clock::time_point deadline) {
    return TlsChannel::read_exact(fd, tls.get(), p, n, deadline);
  }

  // What arrives within `wait` (decrypted), appended to `got`: 1, 0 when nothing came, -1 when
  // the other side closed (or broke the TLS stream).
  int read_some(std::string& got, std::chrono::milliseconds wait) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) return 0;
    char buf[65536];
    if (!tls) {
      const ssize_t r = ::recv(fd, buf, sizeof buf, 0);
      if (r == 0 || (r < 0 && errno == ECONNRESET)) return -1;
      if (r > 0) got.append(buf, static_cast<std::size_t>(r));
      return r > 0 ? 1 : 0;
    }
    std::size_t room = 0;
    char* at = tls->input(room);
    const ssize_t r = ::recv(fd, at, room, 0);
    if (r == 0 || (r < 0 && errno == ECONNRESET)) return -1;
    if (r < 0) return 0;
    tls->received(static_cast<std::size_t>(r));
    for (;;) {
      std::string why;
      const long n = tls->decrypt(buf, sizeof buf, why);
      if (n < 0) return -1;
      if (n == 0) return 1;
      got.append(buf, static_cast<std::size_t>(n));
    }
  }

  // Reads until the other side closes (true) or `limit` passes (false), keeping what came.
  bool read_until_closed(std::string& got, std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end)
      if (read_some(got, std::chrono::milliseconds(20)) < 0) return true;
    return false;
  }
};

// Passes the door at 127.0.0.1:port with `secret`; `status` says why not (the link is then empty).
inline SealedLink pass_sealed(uint16_t port, const std::string& secret, Status* status = nullptr,
                              std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
  SealedLink l;
  const Status s = pass_door("127.0.0.1", port, secret, std::chrono::steady_clock::now() + limit, l.fd, l.tls);
  if (status) *status = s;
  if (!s) l.fd = -1;
  return l;
}

} // namespace chorus::testing
