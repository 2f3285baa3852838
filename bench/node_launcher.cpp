#include "node_launcher.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "op_runner.hpp"

namespace chorus::bench {

namespace {

using Clock = std::chrono::steady_clock;

std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return {};
  return std::string(buf, static_cast<std::size_t>(n));
}

// Forks and execs `path` with `args` (args[0] is argv[0]); the child dies with the launcher.
// `out_fd` >= 0 becomes the child's stdout. Returns the pid, or -1.
pid_t spawn(const std::string& path, const std::vector<std::string>& args, int out_fd, int close_fd) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid != 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);
  if (out_fd >= 0) dup2(out_fd, STDOUT_FILENO);
  if (out_fd >= 0 && out_fd != STDOUT_FILENO) close(out_fd);
  if (close_fd >= 0) close(close_fd);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(path.c_str(), argv.data());
  std::fprintf(stderr, "chorus-bench: error: cannot run %s: %s\n", path.c_str(), std::strerror(errno));
  _exit(127);
}

std::string describe_status(int status) {
  if (status == -1) return "could not be waited for";
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) +
                                  " (" + strsignal(WTERMSIG(status)) + ")";
  return "ended with wait status " + std::to_string(status);
}

// Waits up to `limit` for `pid`; returns its wait status, or nullopt (it is still running).
std::optional<int> wait_for(pid_t pid, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return -1;
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void stop(pid_t pid, int sig) {
  if (pid > 0) kill(pid, sig);
}

// Starts chorus-orchestrator next to this executable on a free loopback port; returns its pid and
// "127.0.0.1:PORT", or an error message.
struct Orchestrator {
  pid_t pid = -1;
  std::string address;
  std::string error;
};

Orchestrator start_orchestrator(const std::string& dir, const Options& o) {
  Orchestrator r;
  const std::string path = dir + "/chorus-orchestrator";
  if (access(path.c_str(), X_OK) != 0) {
    r.error = "cannot find " + path + " (the launcher runs the chorus-orchestrator built next to it)";
    return r;
  }
  int fds[2];
  if (pipe(fds) != 0) {
    r.error = std::string("pipe: ") + std::strerror(errno);
    return r;
  }
  // The secret travels in CHORUS_SECRET (set by the caller), not on the command line.
  std::vector<std::string> args{path, "--port", "0", "--nodes", std::to_string(o.nodes), "--host", "127.0.0.1",
                                "--timeout-ms", std::to_string(o.timeout_ms)};
  if (o.tls()) args.insert(args.end(), {"--tls-cert", o.tls_cert, "--tls-key", o.tls_key, "--tls-ca", o.tls_ca});
  r.pid = spawn(path, args, fds[1], fds[0]);
  close(fds[1]);
  if (r.pid < 0) {
    close(fds[0]);
    r.error = std::string("fork: ") + std::strerror(errno);
    return r;
  }
  // "chorus-orchestrator listening on HOST:PORT for M nodes"
  const std::string marker = "listening on ";
  std::string out;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline) {
    pollfd p{fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, 100);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    char buf[512];
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n <= 0) break;  // it exited (or closed stdout) without announcing its port
    out.append(buf, static_cast<std::size_t>(n));
    const auto at = out.find(marker);
    if (at == std::string::npos) continue;
    const auto from = at + marker.size();
    const auto end = out.find_first_of(" \n", from);
    if (end == std::string::npos) continue;
    const std::string addr = out.substr(from, end - from);
    const auto colon = addr.rfind(':');
    if (colon == std::string::npos || colon + 1 >= addr.size()) break;
    r.address = "127.0.0.1:" + addr.substr(colon + 1);
    break;
  }
  // Its later output (the shutdown line) is dropped: it ignores SIGPIPE.
  close(fds[0]);
  if (r.address.empty()) {
    stop(r.pid, SIGKILL);
    auto st = wait_for(r.pid, std::chrono::seconds(5));
    r.error = path + " did not announce its port" +
              (st ? " (it " + describe_status(*st) + ")" : std::string(" within 20 s")) +
              (out.empty() ? std::string() : "; it printed: " + out);
    r.pid = -1;
  }
  return r;
}

// A generous limit for the whole run of the node processes: registration and shutdown, at most a
// few timed-out waits (a failure stops the sweep), and every row's ops at a pessimistic rate for
// processes sharing this machine. Past it the nodes are taken to hang.
std::chrono::milliseconds run_limit(const Options& o, const std::vector<std::size_t>& sizes) {
  const double timeout_s = static_cast<double>(o.timeout_ms) / 1000.0;
  const uint32_t total = o.participants();
  double s = 30.0 + 4.0 * timeout_s;
  for (std::size_t size : sizes) {
    const Layout l = layout_for(o.op, o.dtype, total, size);
    const double ops = o.warmup + o.iters + 6;  // + barrier, check, 2 all_reduces of the stats, slack
    const double bytes = static_cast<double>(host_bytes(o.op, o.dtype, total, l));
    s += ops * (0.05 + bytes / 200e6);
  }
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

} // namespace

int launch(int argc, char** argv, const Options& o, const std::vector<std::size_t>& sizes) {
  const std::string exe = self_exe();
  if (exe.empty()) {
    std::fprintf(stderr, "chorus-bench: error: cannot read /proc/self/exe to find chorus-orchestrator\n");
    return 1;
  }
  const std::string dir = exe.substr(0, exe.rfind('/'));
  // One secret for the orchestrator and the nodes: --secret, CHORUS_SECRET, or a random one, so
  // that no other process on this machine can join the collective.
  std::string secret = o.secret;
  if (secret.empty())
    if (const char* env = std::getenv("CHORUS_SECRET")) secret = env;
  if (secret.empty()) {
    std::random_device rd;
    char hex[33];
    for (int i = 0; i < 4; ++i) std::snprintf(hex + 8 * i, 9, "%08x", rd());
    secret = hex;
  }
  setenv("CHORUS_SECRET", secret.c_str(), 1);

  Orchestrator orch = start_orchestrator(dir, o);
  if (orch.pid < 0) {
    std::fprintf(stderr, "chorus-bench: error: %s\n", orch.error.c_str());
    return 1;
  }
  std::vector<std::string> args(argv, argv + argc);
  args[0] = exe;
  args.insert(args.end(), {"--orchestrator", orch.address, "--node-address", "127.0.0.1"});
  std::vector<pid_t> nodes;
  std::vector<std::optional<int>> status(o.nodes);
  bool ok = true;
  for (uint32_t k = 0; k < o.nodes; ++k) {
    const pid_t pid = spawn(exe, args, -1, -1);
    if (pid < 0) {
      std::fprintf(stderr, "chorus-bench: error: fork of node process %u: %s\n", k, std::strerror(errno));
      ok = false;
      break;
    }
    nodes.push_back(pid);
  }

  // Wait for every node. Once one failed the others fail too (their ops time out), so they get
  // a shorter grace before they are killed.
  auto deadline = Clock::now() + (ok ? run_limit(o, sizes) : std::chrono::milliseconds(0));
  bool timed_out = false;
  for (;;) {
    std::size_t running = 0;
    for (std::size_t k = 0; k < nodes.size(); ++k) {
      if (status[k]) continue;
      int st = 0;
      const pid_t r = waitpid(nodes[k], &st, WNOHANG);
      if (r == nodes[k]) {
        status[k] = st;
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
          const auto grace = Clock::now() + std::chrono::milliseconds(2 * o.timeout_ms + 10000);
          if (grace < deadline) deadline = grace;
        }
      } else {
        ++running;
      }
    }
    if (running == 0) break;
    if (Clock::now() >= deadline) {
      timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  int rc = 0;
  if (timed_out) {
    std::string which;
    for (std::size_t k = 0; k < nodes.size(); ++k)
      if (!status[k]) {
        which += " " + std::to_string(k) + " (pid " + std::to_string(nodes[k]) + ")";
        stop(nodes[k], SIGKILL);
        status[k] = wait_for(nodes[k], std::chrono::seconds(10)).value_or(-1);
      }
    std::fprintf(stderr,
                 "chorus-bench: error: node process%s still running past the run's limit (or the grace "
                 "after a node failed); killed\n",
                 which.c_str());
    rc = 1;
  }
  if (!ok) rc = 1;
  bool all_usage = true, any_failed = false;
  for (std::size_t k = 0; k < nodes.size(); ++k) {
    const int st = status[k].value_or(-1);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) continue;
    any_failed = true;
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 2)) all_usage = false;
    std::fprintf(stderr, "chorus-bench: error: node process %zu (pid %d) %s\n", k, static_cast<int>(nodes[k]),
                 describe_status(st).c_str());
  }
  if (any_failed && rc == 0) rc = all_usage ? 2 : 1;

  stop(orch.pid, SIGTERM);
  auto ost = wait_for(orch.pid, std::chrono::seconds(10));
  if (!ost) {
    stop(orch.pid, SIGKILL);
    (void)wait_for(orch.pid, std::chrono::seconds(10));
    std::fprintf(stderr, "chorus-bench: error: chorus-orchestrator (pid %d) ignored SIGTERM for 10 s; killed\n",
                 static_cast<int>(orch.pid));
    rc = rc ? rc : 1;
  } else if (!(WIFEXITED(*ost) && WEXITSTATUS(*ost) == 0)) {
    std::fprintf(stderr, "chorus-bench: error: chorus-orchestrator (pid %d) %s\n", static_cast<int>(orch.pid),
                 describe_status(*ost).c_str());
    rc = rc ? rc : 1;
  }
  return rc;
}


} // namespace chorus::bench
