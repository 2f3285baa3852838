// What the hostile-input tests (orchestrator_front_door_test) do to a daemon's public port: raw
// connections that send bytes nobody should send (BASP headers among them) and read what comes
// back, and what they read of the daemon's process (its memory and CPU time, from /proc).
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "transport/door_handshake.hpp"

namespace chorus::testing {

// A BASP header as CAF 0.17 reads it, big endian: operation, two bytes of padding, flags, payload
// length (32 bits), operation data, source actor, destination actor (64 bits each; the actors 0).
inline std::string basp_header(uint8_t operation, uint32_t payload_len, uint64_t operation_data) {
  std::string h(32, '\0');
  h[0] = static_cast<char>(operation);
  for (int i = 0; i < 4; ++i) h[4 + i] = static_cast<char>(payload_len >> (24 - 8 * i));
  for (int i = 0; i < 8; ++i) h[8 + i] = static_cast<char>(operation_data >> (56 - 8 * i));
  return h;
}

// A plain blocking connection to 127.0.0.1:port (-1 when it fails), system calls only, so a
// flood of them is as fast as the machine allows.
inline int connect_raw(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
  if (fd >= 0) close(fd);
  return -1;
}

// Reads until the other end closes (true; a reset counts) or `limit` passes (false), keeping
// what came.
inline bool read_until_closed(int fd, std::string& got, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  char buf[4096];
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    const ssize_t r = recv(fd, buf, sizeof buf, 0);
    if (r == 0 || (r < 0 && errno == ECONNRESET)) return true;
    if (r > 0) got.append(buf, static_cast<std::size_t>(r));
  }
  return false;
}

struct RawReply {
  int greeting_mode = -1;  // the door's mode, -1: no door greeting came
  std::string after;       // what came after the greeting
  bool closed = false;     // the door closed the connection (within 5 s)
};

// Connects, reads the door's greeting, sends `bytes` (as much as the door takes before it closes)
// and reads the rest until the door closes.
inline RawReply send_raw(uint16_t port, const std::string& bytes) {
  RawReply r;
  const int fd = connect_raw(port);
  if (fd < 0) return r;
  std::string greeting;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  char buf[door::kGreetingSize];
  while (greeting.size() < door::kGreetingSize && std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    const ssize_t n = recv(fd, buf, door::kGreetingSize - greeting.size(), 0);
    if (n <= 0) break;
    greeting.append(buf, static_cast<std::size_t>(n));
  }
  door::Greeting g{};
  door::Mode mode{};
  if (greeting.size() == g.size()) {
    std::copy(greeting.begin(), greeting.end(), g.begin());
    if (door::read_greeting(g, mode)) r.greeting_mode = static_cast<int>(mode);
  }
  for (std::size_t sent = 0; sent < bytes.size() && std::chrono::steady_clock::now() < end;) {
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno != EAGAIN) break;  // the door closed: it read what it reads
    if (n > 0) sent += static_cast<std::size_t>(n);
  }
  r.closed = read_until_closed(fd, r.after, std::chrono::seconds(5));
  close(fd);
  return r;
}

// A BASP header with every field given (big endian, as basp_header).
inline std::string basp_header_full(uint8_t operation, uint8_t flags, uint32_t payload_len, uint64_t operation_data,
                                    uint64_t source_actor, uint64_t dest_actor) {
  std::string h = basp_header(operation, payload_len, operation_data);
  h[3] = static_cast<char>(flags);
  for (int i = 0; i < 8; ++i) h[16 + i] = static_cast<char>(source_actor >> (56 - 8 * i));
  for (int i = 0; i < 8; ++i) h[24 + i] = static_cast<char>(dest_actor >> (56 - 8 * i));
  return h;
}

// The TCP ports a process listens on (IPv4 and IPv6), from /proc: its sockets' inodes matched
// against the kernel's tables.
inline std::vector<uint16_t> listening_tcp_ports(pid_t pid) {
  std::vector<std::string> inodes;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd/";
  for (int fd = 0; fd < 4096; ++fd) {
    char target[128];
    const ssize_t n = readlink((dir + std::to_string(fd)).c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    const std::string t(target, static_cast<std::size_t>(n));
    if (t.rfind("socket:[", 0) == 0) inodes.push_back(t.substr(8, t.size() - 9));
  }
  std::vector<uint16_t> ports;
  for (const char* table : {"/net/tcp", "/net/tcp6"}) {
    std::ifstream f("/proc/" + std::to_string(pid) + table);
    std::string line;
    std::getline(f, line);  // the column names
    while (std::getline(f, line)) {
      std::istringstream in(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      in >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (state != "0A") continue;  // LISTEN
      if (std::find(inodes.begin(), inodes.end(), inode) == inodes.end()) continue;
      ports.push_back(static_cast<uint16_t>(std::stoul(local.substr(local.find(':') + 1), nullptr, 16)));
    }
  }
  return ports;
}

// A TCP proxy on 127.0.0.1 that relays every connection to 127.0.0.1:target and keeps a copy of
// every byte both ways: what anyone on the wire would capture.
class RecordingProxy {
 public:
  explicit RecordingProxy(uint16_t target) : target_(target) {
    listener_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && listen(listener_, 16) == 0 &&
        getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len) == 0)
      port = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { serve(); });
  }
  ~RecordingProxy() {
    stop_ = true;
    ::shutdown(listener_, SHUT_RDWR);
    acceptor_.join();
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    }
    for (auto& t : pumps_) t.join();
    for (int fd : fds_) ::close(fd);
    ::close(listener_);
  }
  uint16_t port = 0;
  // Everything relayed so far, both ways.
  std::string captured() {
    std::lock_guard<std::mutex> lk(mu_);
    return captured_;
  }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{listener_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const int c = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      const int s = connect_raw(target_);
      if (s < 0) {
        ::close(c);
        continue;
      }
      std::lock_guard<std::mutex> lk(mu_);
      fds_.push_back(c);
      fds_.push_back(s);
      pumps_.emplace_back([this, c, s] { pump(c, s); });
      pumps_.emplace_back([this, c, s] { pump(s, c); });
    }
  }
  void pump(int from, int to) {
    char buf[4096];
    for (;;) {
      const ssize_t r = recv(from, buf, sizeof buf, 0);
      if (r <= 0) break;
      {
        std::lock_guard<std::mutex> lk(mu_);
        captured_.append(buf, static_cast<std::size_t>(r));
      }
      if (send(to, buf, static_cast<std::size_t>(r), MSG_NOSIGNAL) != r) break;
    }
    ::shutdown(to, SHUT_WR);
  }
  uint16_t target_;
  int listener_ = -1;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::thread> pumps_;
  std::string captured_;
};

// A process's resident memory in KiB (VmRSS), -1 when it cannot be read.
inline long rss_kib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

// A process's CPU time (user and system, every thread) at a moment.
struct CpuSample {
  double seconds = 0;
  std::chrono::steady_clock::time_point at;
  // The share of one core it used since `before`.
  double share_since(const CpuSample& before) const {
    const double wall = std::chrono::duration<double>(at - before.at).count();
    return wall > 0 ? (seconds - before.seconds) / wall : 0;
  }
};
inline CpuSample cpu_of(pid_t pid) {
  CpuSample s;
  s.at = std::chrono::steady_clock::now();
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));  // after "pid (comm) "
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {  // fields 14 and 15: utime, stime (in ticks)
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  s.seconds = (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  return s;
}

} // namespace chorus::testing
