// Host names and addresses (core/host_names.hpp): which address of this host another one reaches.
#include "core/host_names.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace chorus {

namespace {

// The source address of the route to `a`.
std::string route_source(const addrinfo* a) {
  const int s = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return "";
  sockaddr_storage me{};
  socklen_t len = sizeof me;
  std::string out;
  // A datagram socket's connect sends nothing: it only picks the route and the source address.
  if (connect(s, a->ai_addr, a->ai_addrlen) == 0 && getsockname(s, reinterpret_cast<sockaddr*>(&me), &len) == 0) {
    char text[INET6_ADDRSTRLEN] = {};
    const void* at = me.ss_family == AF_INET6 ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&me)->sin6_addr)
                                               : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&me)->sin_addr);
    if (inet_ntop(me.ss_family, at, text, sizeof text)) out = text;
  }
  ::close(s);
  return out;
}

} // namespace

std::string first_address(const std::string& host, bool skip_loopback) {
  for (int family : {AF_INET, AF_INET6}) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = family;
    hints.ai_socktype = SOCK_DGRAM;
    if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0) continue;
    std::string out;
    for (const addrinfo* a = res; a && out.empty(); a = a->ai_next) {
      std::string ip = route_source(a);
      if (!ip.empty() && !(skip_loopback && is_loopback_host(ip))) out = ip;
    }
    freeaddrinfo(res);
    if (!out.empty()) return out;
  }
  return "";
}

std::string address_toward(const std::string& host, bool one_host) {
  std::string ip = first_address(host, false);
  // An orchestrator named by a loopback address has every rank on this host.
  if (ip.empty() || !is_loopback_host(ip) || one_host || is_loopback_host(host)) return ip;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0)
    if (std::string other = first_address(name, true); !other.empty()) return other;
  return ip;
}

std::string host_of(const std::string& host_port) {
  const auto colon = host_port.rfind(':');
  std::string h = colon == std::string::npos ? host_port : host_port.substr(0, colon);
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  return h;
}

} // namespace chorus
