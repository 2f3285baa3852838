// Sockets with deadlines, for setting up the data connections (listen, accept, connect) and for the
// handshakes on them before they become Connections. host may be a name or a numeric address.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <chorus/status.hpp>
#include "core/wait.hpp"

namespace chorus {

// A listening socket on host:port (port 0: any free port); returns the fd and the bound port.
Status tcp_listen(const std::string& host, uint16_t port, int& fd, uint16_t& bound);
// Accepts one connection before the deadline (fd -1 and a timeout status otherwise).
Status tcp_accept(int listen_fd, Clock::time_point deadline, int& fd);
// Connects before the deadline, retrying while the other side is not listening yet. `from`: a
// numeric address of this host to leave from (a node's advertised data address, which the other
// side's data port admits), else the system picks; one this host lacks is not bound (logged).
Status tcp_connect(const std::string& host, uint16_t port, Clock::time_point deadline, int& fd,
                   const std::string& from = "");
// The numeric addresses `host` resolves to, IPv4-mapped ones as IPv4 (empty: it does not resolve).
std::vector<std::string> numeric_addresses(const std::string& host);
// The numeric address of a connected socket's other end ("" when it cannot be told).
std::string peer_ip(int fd);
// Whether `host` names every interface ("", 0.0.0.0, ::, *) rather than one address.
bool is_wildcard_host(const std::string& host);
// The other end of a connected socket, "host:port" ("an unknown address" when it cannot be told).
std::string peer_address(int fd);
// Splits "host:port"; false when malformed.
bool split_host_port(const std::string& addr, std::string& host, uint16_t& port);
// The timeout for one poll() towards `deadline`: what is left, in ms, at most 1 s a call.
int poll_ms_until(Clock::time_point deadline);
// Reads or writes exactly n bytes on a blocking socket before the deadline (for handshakes).
Status read_exact(int fd, void* p, std::size_t n, Clock::time_point deadline);
Status write_exact(int fd, const void* p, std::size_t n, Clock::time_point deadline);

} // namespace chorus
