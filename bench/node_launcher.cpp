#include "node_launcher.hpp"

#include <fcntl.h>
#include <signal.h>
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
#include <vector>

#include "op_runner.hpp"
#include "testkit/process.hpp"

namespace chorus::bench {

namespace {

using Clock = std::chrono::steady_clock;
using testkit::describe_status;
using testkit::wait_for;

// Starts chorus-orchestrator next to this executable on a free loopback port.
testkit::Orchestrator start_orchestrator(const Options& o) {
  const std::string path = testkit::orchestrator_path();
  if (access(path.c_str(), X_OK) != 0)
    return {-1, 0, "cannot find " + path + " (the launcher runs the chorus-orchestrator built next to it)"};
  // The secret travels in CHORUS_SECRET (set by the caller), not on the command line.
  std::vector<std::string> args{"--port", "0", "--nodes", std::to_string(o.nodes), "--host", "127.0.0.1",
                                "--timeout-ms", std::to_string(o.timeout_ms)};
  if (o.tls()) args.insert(args.end(), {"--tls-cert", o.tls_cert, "--tls-key", o.tls_key, "--tls-ca", o.tls_ca});
  return testkit::start_orchestrator(args, std::chrono::seconds(20));
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

// Each node process's id, as it wrote it to its pipe once it joined (-1: it never did).
std::vector<int> node_ids(const std::vector<int>& id_pipes) {
  std::vector<int> ids;
  for (int fd : id_pipes) {
    char buf[32] = {};
    const ssize_t n = fd >= 0 ? ::read(fd, buf, sizeof buf - 1) : -1;
    ids.push_back(n > 0 && buf[0] >= '0' && buf[0] <= '9' ? std::atoi(buf) : -1);
  }
  return ids;
}

// "node 2 (process 0)", or "node process 0 (before it joined)".
std::string node_name(const std::vector<int>& ids, std::size_t k) {
  if (k < ids.size() && ids[k] >= 0) return "node " + std::to_string(ids[k]) + " (process " + std::to_string(k) + ")";
  return "node process " + std::to_string(k) + " (before it joined)";
}

} // namespace

int launch(int argc, char** argv, const Options& o, const std::vector<std::size_t>& sizes) {
  const std::string exe = testkit::self_path();
  if (exe.empty()) {
    std::fprintf(stderr, "chorus-bench: error: cannot read /proc/self/exe to find chorus-orchestrator\n");
    return 1;
  }
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

  const testkit::Orchestrator orch = start_orchestrator(o);
  if (orch.pid < 0) {
    std::fprintf(stderr, "chorus-bench: error: %s\n", orch.error.c_str());
    return 1;
  }
  std::vector<std::string> args(argv + 1, argv + argc);
  args.insert(args.end(), {"--orchestrator", "127.0.0.1:" + std::to_string(orch.port), "--node-address", "127.0.0.1"});
  std::vector<pid_t> nodes;
  std::vector<std::optional<int>> status(o.nodes);
  std::vector<int> id_pipes;  // read ends: each node process writes its node id there once joined
  struct ClosePipes {
    std::vector<int>& fds;
    ~ClosePipes() {
      for (int fd : fds) ::close(fd);
    }
  } close_pipes{id_pipes};
  bool ok = true;
  for (uint32_t k = 0; k < o.nodes; ++k) {
    int p[2] = {-1, -1};
    std::vector<std::string> env;
    if (::pipe2(p, O_NONBLOCK) == 0) {  // the write end stays open across exec
      fcntl(p[0], F_SETFD, FD_CLOEXEC);
      env.push_back("CHORUS_BENCH_NODE_ID_FD=" + std::to_string(p[1]));
    }
    const pid_t pid = testkit::spawn(exe, args, testkit::Output::inherit, env).pid;  // dies with this (main) thread
    if (p[1] >= 0) ::close(p[1]);
    id_pipes.push_back(p[0]);
    if (pid < 0) {
      std::fprintf(stderr, "chorus-bench: error: fork of node process %u: %s\n", k, std::strerror(errno));
      ok = false;
      break;
    }
    nodes.push_back(pid);
  }

  // Wait for every node, in the order they exit. Once one failed the others fail too (their ops
  // time out), so they get a shorter grace before they are killed.
  auto deadline = Clock::now() + (ok ? run_limit(o, sizes) : std::chrono::milliseconds(0));
  bool timed_out = false;
  std::vector<std::size_t> running(nodes.size());
  for (std::size_t k = 0; k < running.size(); ++k) running[k] = k;
  while (!running.empty()) {
    std::vector<pid_t> pids;
    for (std::size_t k : running) pids.push_back(nodes[k]);
    const auto exit = testkit::wait_any(pids, deadline);
    if (!exit) {
      timed_out = true;
      break;
    }
    const int st = exit->status;
    status[running[exit->index]] = st;
    running.erase(running.begin() + static_cast<std::ptrdiff_t>(exit->index));
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
      const auto grace = Clock::now() + std::chrono::milliseconds(2 * o.timeout_ms + 10000);
      if (grace < deadline) deadline = grace;
    }
  }
  int rc = 0;
  const std::vector<int> ids = node_ids(id_pipes);
  if (timed_out) {
    std::string which;
    for (std::size_t k = 0; k < nodes.size(); ++k)
      if (!status[k]) {
        which += ", " + node_name(ids, k) + " (pid " + std::to_string(nodes[k]) + ")";
        kill(nodes[k], SIGKILL);
        status[k] = wait_for(nodes[k], std::chrono::seconds(10)).value_or(-1);
      }
    std::fprintf(stderr,
                 "chorus-bench: error: still running past the run's limit (or the grace "
                 "after a node failed), killed: %s\n",
                 which.c_str() + 2);
    rc = 1;
  }
  if (!ok) rc = 1;
  bool all_usage = true, any_failed = false;
  for (std::size_t k = 0; k < nodes.size(); ++k) {
    const int st = status[k].value_or(-1);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) continue;
    any_failed = true;
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 2)) all_usage = false;
    std::fprintf(stderr, "chorus-bench: error: %s (pid %d) %s\n", node_name(ids, k).c_str(),
                 static_cast<int>(nodes[k]), describe_status(st).c_str());
  }
  if (any_failed && rc == 0) rc = all_usage ? 2 : 1;

  kill(orch.pid, SIGTERM);
  auto ost = wait_for(orch.pid, std::chrono::seconds(10));
  if (!ost) {
    kill(orch.pid, SIGKILL);
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
