// Faults of one data connection, injected from outside the node processes (fault_injection_test):
// the connection between two given processes found with `ss -tnp`, closed with `ss -K` (the
// kernel destroys the socket: its process reads ECONNABORTED, the other end a reset), or stalled
// with an nftables rule that drops its packets both ways (the connection stays open and silent).
// Both need root (CAP_NET_ADMIN) and the tools: link_tools_missing() says what is missing, so a
// test can skip visibly. A stall's table is deleted by its guard, however the test ends.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace chorus::multi_node {

// Runs `cmd` with sh, stderr with stdout: its output, and its exit status in `rc` (-1: not run).
inline std::string shell(const std::string& cmd, int& rc) {
  std::string out;
  rc = -1;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return out;
  char buf[4096];
  for (std::size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  rc = status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

// One end of a TCP connection on loopback as `ss -tnp` lists it.
struct SocketEnd {
  uint16_t local = 0, peer = 0;
  long pid = -1;
};

inline std::vector<SocketEnd> established_sockets() {
  int rc = 0;
  std::istringstream in(shell("ss -tnpH state established", rc));
  std::vector<SocketEnd> ends;
  static const std::regex addr(R"(^127\.0\.0\.1:(\d+)$)"), pid(R"(pid=(\d+))");
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::vector<uint16_t> ports;
    for (std::string w; words >> w;)
      if (std::smatch m; std::regex_match(w, m, addr)) ports.push_back(static_cast<uint16_t>(std::stoul(m[1])));
    std::smatch m;
    if (ports.size() == 2 && std::regex_search(line, m, pid)) ends.push_back({ports[0], ports[1], std::stol(m[1])});
  }
  return ends;
}

// The data connection between the processes `a` and `b`: a's local port and b's (nullopt: none).
inline std::optional<std::pair<uint16_t, uint16_t>> data_connection(long a, long b) {
  const auto ends = established_sockets();
  for (const auto& e : ends)
    if (e.pid == a)
      for (const auto& f : ends)
        if (f.pid == b && f.local == e.peer && f.peer == e.local) return std::make_pair(e.local, e.peer);
  return std::nullopt;
}

// Destroys the loopback socket with local port `sport` and peer port `dport`; true when ss says it did.
inline bool destroy_socket(uint16_t sport, uint16_t dport) {
  int rc = 0;
  const std::string out = shell("ss -K -tnH src 127.0.0.1 sport = :" + std::to_string(sport) + " dport = :" +
                                    std::to_string(dport),
                                rc);
  return rc == 0 && out.find(":" + std::to_string(sport)) != std::string::npos;
}

// Drops every packet of the loopback connection between ports a and b, both ways, while it lives.
class Stall {
 public:
  Stall(uint16_t a, uint16_t b) {
    const std::string t = "inet " + table_;
    ok_ = run("nft add table " + t) &&
          run("nft add chain " + t + " out '{ type filter hook output priority 0 ; }'") &&
          run("nft add rule " + t + " out tcp sport " + std::to_string(a) + " tcp dport " + std::to_string(b) +
              " counter drop") &&
          run("nft add rule " + t + " out tcp sport " + std::to_string(b) + " tcp dport " + std::to_string(a) +
              " counter drop");
  }
  ~Stall() { lift(); }
  Stall(const Stall&) = delete;
  Stall& operator=(const Stall&) = delete;
  bool ok() const { return ok_; }
  // Packets dropped so far (both rules).
  uint64_t dropped() const {
    int rc = 0;
    std::istringstream in(shell("nft list table inet " + table_, rc));
    uint64_t n = 0;
    static const std::regex packets(R"(packets (\d+))");
    for (std::string line; std::getline(in, line);)
      if (std::smatch m; std::regex_search(line, m, packets)) n += std::stoull(m[1]);
    return n;
  }
  // Deletes the table (idempotent): the connection's packets flow again.
  void lift() {
    if (lifted_) return;
    lifted_ = true;
    run("nft delete table inet " + table_);
  }

 private:
  static bool run(const std::string& cmd) {
    int rc = 0;
    shell(cmd, rc);
    return rc == 0;
  }
  std::string table_ = "chorus_fault_" + std::to_string(getpid());
  bool ok_ = false, lifted_ = false;
};

// Why this machine cannot inject link faults ("" when it can): ss must find the connection, and
// destroy a loopback socket of our own with -K; for a stall, nft must add and delete a table.
inline std::string link_tools_missing(bool stall) {
  int rc = 0;
  shell("command -v ss", rc);
  if (rc != 0) return "ss (iproute2) is not installed";
  if (stall) {
    shell("command -v nft", rc);
    if (rc != 0) return "nft (nftables) is not installed";
    const std::string probe = "inet chorus_probe_" + std::to_string(getpid());
    const std::string out = shell("nft add table " + probe + " && nft delete table " + probe, rc);
    if (rc != 0) return "nft cannot add a table here: " + out;
  }
  // A connection of our own to destroy.
  int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  std::string why;
  if (bind(l, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(l, 1) != 0 ||
      getsockname(l, reinterpret_cast<sockaddr*>(&sa), &len) != 0 ||
      connect(c, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    why = "no loopback connection to probe ss -K with";
  } else {
    sockaddr_in mine{};
    len = sizeof mine;
    getsockname(c, reinterpret_cast<sockaddr*>(&mine), &len);
    char byte = 0;
    if (!destroy_socket(ntohs(mine.sin_port), ntohs(sa.sin_port)) || recv(c, &byte, 1, MSG_DONTWAIT) >= 0 ||
        errno != ECONNABORTED)
      why = "ss -K cannot destroy a socket here (a kernel without CONFIG_INET_DIAG_DESTROY, or no CAP_NET_ADMIN)";
  }
  close(c);
  close(l);
  return why;
}

} // namespace chorus::multi_node
