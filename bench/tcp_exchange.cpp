// chorus-tcp-exchange: the loopback TCP limit an all-reduce between two node processes runs into.
// Two processes send each other 64 MiB at the same time over one connection (a send and a receive
// thread each), ten times; prints the best time and the per-direction rate, then the median and the
// mean of the ten (chorus-bench's busbw is from its mean) and the congestion control the sockets
// ran (the system's default: on loopback it alone can halve the rate). A 2-rank all-reduce of
// 64 MiB moves exactly this much each way, so its time cannot go below this one over TCP.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t kBytes = std::size_t{64} << 20;

double exchange(int fd, const std::vector<char>& out, std::vector<char>& in) {
  const auto t0 = std::chrono::steady_clock::now();
  std::thread rx([&] {
    std::size_t got = 0;
    while (got < kBytes) {
      ssize_t r = recv(fd, in.data() + got, kBytes - got, 0);
      if (r <= 0) return;
      got += static_cast<std::size_t>(r);
    }
  });
  std::size_t sent = 0;
  while (sent < kBytes) {
    ssize_t r = send(fd, out.data() + sent, kBytes - sent, 0);
    if (r <= 0) break;
    sent += static_cast<std::size_t>(r);
  }
  rx.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

} // namespace

int main() {
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (ls < 0 || bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(ls, 1) != 0 ||
      getsockname(ls, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    std::perror("chorus-tcp-exchange: listen");
    return 1;
  }
  std::vector<char> out(kBytes, 1), in(kBytes, 0);
  const pid_t child = fork();
  if (child == 0) {
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) _exit(1);
    for (int i = 0; i < 11; ++i) exchange(c, out, in);
    _exit(0);
  }
  int s = accept(ls, nullptr, nullptr);
  if (s < 0) {
    std::perror("chorus-tcp-exchange: accept");
    return 1;
  }
  // One untimed exchange first: after the fork, the first writes into the buffers fault their
  // pages in (copy on write), as chorus-bench's warm-up iterations keep out of its figures.
  exchange(s, out, in);
  std::vector<double> took;
  for (int i = 0; i < 10; ++i) took.push_back(exchange(s, out, in));
  int status = 0;
  waitpid(child, &status, 0);
  char cc[32] = "?";
  socklen_t cc_len = sizeof cc - 1;
  getsockopt(s, IPPROTO_TCP, TCP_CONGESTION, cc, &cc_len);
  std::sort(took.begin(), took.end());
  const double best = took.front(), median = (took[4] + took[5]) / 2,
               mean = std::accumulate(took.begin(), took.end(), 0.0) / static_cast<double>(took.size());
  auto rate = [](double t) { return static_cast<double>(kBytes) / t / 1e9; };
  std::printf("# loopback tcp, 64 MiB each way at once (best of 10): %.1f ms = %.2f GB/s per direction; "
              "median %.1f ms = %.2f GB/s, mean %.1f ms = %.2f GB/s (congestion control %s)\n",
              best * 1e3, rate(best), median * 1e3, rate(median), mean * 1e3, rate(mean), cc);
  return 0;
}
