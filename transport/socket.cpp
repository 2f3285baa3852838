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
#include <vector>

namespace chorus {

namespace {

std::string err_text(int e) { return std::strerror(e); }

void tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // small control frames go at once
}

// The numeric text of an address; an IPv4-mapped IPv6 address as IPv4.
std::string numeric_text(const sockaddr* sa) {
  char host[INET6_ADDRSTRLEN] = "";
  if (sa->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, host, sizeof host);
  } else if (sa->sa_family == AF_INET6) {
    const auto& a6 = reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a6)) inet_ntop(AF_INET, &a6.s6_addr[12], host, sizeof host);
    else inet_ntop(AF_INET6, &a6, host, sizeof host);
  }
  return host;
}

} // namespace

bool is_wildcard_host(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]" || host == "*";
}

std::vector<std::string> numeric_addresses(const std::string& host) {
  std::vector<std::string> out;
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return out;
  for (addrinfo* a = res; a; a = a->ai_next) {
    std::string t = numeric_text(a->ai_addr);
    if (!t.empty() && std::find(out.begin(), out.end(), t) == out.end()) out.push_back(std::move(t));
  }
  freeaddrinfo(res);
  return out;
}

std::string peer_ip(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  return numeric_text(reinterpret_cast<const sockaddr*>(&ss));
}

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
    int rc = poll(&p, 1, poll_ms_until(deadline));
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

Status tcp_connect(const std::string& host, uint16_t port, Clock::time_point deadline, int& fd,
                   const std::string& from) {
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
    return {Errc::unreachable, "cannot resolve " + where + ": " + gai_strerror(rc)};
  // The address to leave from, when given and numeric (a name is not resolved here).
  addrinfo* source = nullptr;
  if (!from.empty() && !is_wildcard_host(from)) {
    addrinfo shints{};
    shints.ai_family = AF_UNSPEC;
    shints.ai_socktype = SOCK_STREAM;
    shints.ai_flags = AI_NUMERICHOST;
    if (getaddrinfo(from.c_str(), "0", &shints, &source) != 0) source = nullptr;
  }
  auto bind_source = [&](int s, int family) {
    for (addrinfo* a = source; a; a = a->ai_next) {
      if (a->ai_family != family) continue;
      // The port is picked by connect(), knowing the destination, rather than by bind(), which
      // must find one no socket holds: with thousands in TIME_WAIT (a host that made many
      // connections) that search took milliseconds of CPU per connection.
#ifdef IP_BIND_ADDRESS_NO_PORT
      int one = 1;
      setsockopt(s, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
#endif
      if (::bind(s, a->ai_addr, a->ai_addrlen) != 0)  // not an address of this host: left unbound
        CHORUS_LOG(info, net, LogWhere{}, "cannot leave from " + from + " (" + err_text(errno) + "); connecting to " +
                                              where + " from the address the system picks");
      return;
    }
  };
  std::string last = "no address";
  fd = -1;
  auto backoff = std::chrono::milliseconds(20);
  do {
    for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
      int s = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
      if (s < 0) continue;
      bind_source(s, a->ai_family);
      int rc = connect(s, a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd p{s, POLLOUT, 0};
        while ((rc = poll(&p, 1, poll_ms_until(deadline))) == 0 && Clock::now() < deadline) {
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
  if (source) freeaddrinfo(source);
  if (fd < 0) return {Errc::unreachable, "cannot connect to " + where + " in time: " + last};
  return Status::ok();
}

namespace {
template <class Op>
Status exact(int fd, std::size_t n, Clock::time_point deadline, short events, Op op, const char* what) {
  std::size_t done = 0;
  while (done < n) {
    pollfd p{fd, events, 0};
    int rc = poll(&p, 1, poll_ms_until(deadline));
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

int poll_ms_until(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms < 0 ? 0 : static_cast<int>(std::min<long long>(ms, 1000));
}

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
