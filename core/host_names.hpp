// Host names and addresses as chorus writes and judges them (Config::from_env, rank 0's hosted
// orchestrator): one rule for "loopback" and one way to put an IPv6 address before a port.
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

} // namespace chorus
