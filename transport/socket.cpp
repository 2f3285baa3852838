#include "transport/socket.hpp"

#include "core/log.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace chorus {

namespace {

std::string err_text(int e) { return std::strerror(e); }

int remaining_ms(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms < 0 ? 0 : static_cast<int>(std::min<long long>(ms, 1000));
}

void tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // small control frames go at once
}

} // namespace

std::string peer_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  char host[INET6_ADDRSTRLEN] = "";
  uint16_t port = 0;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0 && ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
  }
  if (host[0] == '\0') return "an unknown address";
  return std::string(host) + ":" + std::to_string(port);
}

bool split_host_port(const std::string& addr, std::string& host, uint16_t& port) {
  auto colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == addr.size()) return false;
  host = addr.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  try {
    std::size_t used = 0;
    unsigned long p = std::stoul(addr.substr(colon + 1), &used);
    if (used != addr.size() - colon - 1 || p > 65535) return false;
    port = static_cast<uint16_t>(p);
  } catch (...) {
    return false;
  }
  return true;
}

Status tcp_listen(const std::string& host, uint16_t port, int& fd, uint16_t& bound) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  const std::string where = host + ":" + std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
    return {Errc::invalid_argument, "cannot resolve " + where + ": " + gai_strerror(rc)};
  Status st(Errc::unreachable, "cannot listen on " + where);
  fd = -1;
  for (addrinfo* a = res; a; a = a->ai_next) {
    int s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (s < 0) continue;
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(s, a->ai_addr, a->ai_addrlen) == 0 && listen(s, SOMAXCONN) == 0) {  // a burst waits, not refused
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      getsockname(s, reinterpret_cast<sockaddr*>(&ss), &len);
      bound = ntohs(ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                            : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
      fd = s;
      st = Status::ok();
      break;
    }
    st = Status(Errc::unreachable, "cannot listen on " + where + ": " + err_text(errno));
    ::close(s);
  }
  freeaddrinfo(res);
  return st;
}

Status tcp_accept(int listen_fd, Clock::time_point deadline, int& fd) {
  fd = -1;
  while (Clock::now() < deadline) {
    pollfd p{listen_fd, POLLIN, 0};
    int rc = poll(&p, 1, remaining_ms(deadline));
    if (rc < 0 && errno != EINTR) return {Errc::internal, "poll on the data listener: " + err_text(errno)};
    if (rc <= 0) continue;
    int s = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (s < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      return {Errc::internal, "accept on the data listener: " + err_text(errno)};
    }
    tune(s);
    fd = s;
    return Status::ok();
  }
  return {Errc::timeout, "no connection arrived in time"};
}

Status tcp_connect(const std::string& host, uint16_t port, Clock::time_point deadline, int& fd) {
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
    return {Errc::unreachable, "cannot resolve " + where + ": " + gai_strerror(rc)};
  std::string last = "no address";
  fd = -1;
  auto backoff = std::chrono::milliseconds(20);
  do {
    for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
      int s = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
      if (s < 0) continue;
      int rc = connect(s, a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd p{s, POLLOUT, 0};
        while ((rc = poll(&p, 1, remaining_ms(deadline))) == 0 && Clock::now() < deadline) {
        }
        int soerr = rc > 0 ? 0 : ETIMEDOUT;
        socklen_t len = sizeof soerr;
        if (rc > 0) getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &len);
        rc = soerr == 0 ? 0 : -1;
        errno = soerr;
      }
      if (rc == 0) {
        fcntl(s, F_SETFL, fcntl(s, F_GETFL) & ~O_NONBLOCK);
        tune(s);
        fd = s;
      } else {
        last = err_text(errno);
        ::close(s);
      }
    }
    if (fd < 0 && Clock::now() < deadline) {
      // Nobody listens yet (a launcher may start the other side late): tried again, each pause
      // twice the last (20 ms to 1 s), each try said at info.
      const auto pause = std::min(backoff, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
      CHORUS_LOG(info, net, LogWhere{},
                 "cannot connect to " + where + " yet (" + last + "); trying again in " + std::to_string(pause.count()) + " ms");
      std::this_thread::sleep_for(pause);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
    }
  } while (fd < 0 && Clock::now() < deadline);
  freeaddrinfo(res);
  if (fd < 0) return {Errc::unreachable, "cannot connect to " + where + " in time: " + last};
  return Status::ok();
}

namespace {
template <class Op>
Status exact(int fd, std::size_t n, Clock::time_point deadline, short events, Op op, const char* what) {
  std::size_t done = 0;
  while (done < n) {
    pollfd p{fd, events, 0};
    int rc = poll(&p, 1, remaining_ms(deadline));
    if (rc < 0 && errno != EINTR) return {Errc::unreachable, std::string(what) + ": " + err_text(errno)};
    if (rc == 0 && Clock::now() >= deadline) return {Errc::timeout, std::string(what) + " timed out"};
    if (rc <= 0) continue;
    ssize_t r = op(done);
    if (r == 0) return {Errc::unreachable, std::string(what) + ": the connection was closed"};
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return {Errc::unreachable, std::string(what) + ": " + err_text(errno)};
    }
    done += static_cast<std::size_t>(r);
  }
  return Status::ok();
}
} // namespace

Status read_exact(int fd, void* p, std::size_t n, Clock::time_point deadline) {
  auto* b = static_cast<char*>(p);
  return exact(fd, n, deadline, POLLIN, [&](std::size_t d) { return recv(fd, b + d, n - d, MSG_DONTWAIT); },
               "handshake read");
}

Status write_exact(int fd, const void* p, std::size_t n, Clock::time_point deadline) {
  auto* b = static_cast<const char*>(p);
  return exact(fd, n, deadline, POLLOUT,
               [&](std::size_t d) { return send(fd, b + d, n - d, MSG_DONTWAIT | MSG_NOSIGNAL); },
               "handshake write");
}

} // namespace chorus
