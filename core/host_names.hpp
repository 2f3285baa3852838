// Host names and addresses as chorus writes and judges them (Config::from_env, rank 0's hosted
// orchestrator, the Python package's join): one rule for "loopback", one way to put an IPv6
// address before a port, and which of this host's addresses another host reaches.
#pragma once
#include <cstdint>
#include <string>

namespace chorus {

// A name or address that means this host alone: every rank that uses it is here.
inline bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

// "host:port", with an IPv6 address in brackets.
inline std::string host_port(const std::string& host, uint64_t port) {
  const bool v6 = host.find(':') != std::string::npos && host.front() != '[';
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

// This host's first address (IPv4 first) on a route to `host`, "" when none can be told;
// `skip_loopback` passes over loopback answers.
std::string first_address(const std::string& host, bool skip_loopback);

// The host's address on the route to `host` (what another host reaches this one's data plane
// at), IPv4 first, or "" when no route can be told. A loopback answer is kept only when every
// rank is on this host (`one_host`): a name that resolves to this host's loopback (Debian's
// /etc/hosts maps the host name to 127.0.1.1) would otherwise send the others to themselves, so
// the host's first other address is taken instead.
std::string address_toward(const std::string& host, bool one_host);

// The host of "host:port" ("[v6]:port" gives the bare v6 address).
std::string host_of(const std::string& host_port);

} // namespace chorus
