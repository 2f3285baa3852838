// Child processes for the multi-process tests: start a binary that sits next to the test binary,
// read what it prints, wait for it with a limit, and make sure nothing outlives the test.
#pragma once
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace chorus::testing {

using namespace std::chrono_literals;

// A binary in the test binary's own directory (build/bin).
inline std::string sibling(const std::string& name) {
  char buf[PATH_MAX];
  auto n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return {};
  std::string self(buf, static_cast<std::size_t>(n));
  return self.substr(0, self.rfind('/')) + "/" + name;
}

inline std::string daemon_path() { return sibling("chorus-orchestrator"); }

// Forks and runs `path` with its stdout (and stderr when `both`) on a pipe; returns the pid and
// the read end of the pipe.
inline std::pair<pid_t, int> spawn(const std::string& path, const std::vector<std::string>& args,
                                   const std::vector<std::string>& env = {}, bool both = false) {
  int fds[2];
  if (pipe(fds) != 0) return {-1, -1};
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    if (both) dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> argv{const_cast<char*>(path.c_str())};
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(path.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  return {pid, fds[0]};
}


// Starts `path` with `args` and reads its stdout until `marker` followed by a word appears;
// returns the pid and that word ("" when it did not appear within 5 s).
inline std::pair<pid_t, std::string> start_process(const std::string& path, const std::vector<std::string>& args,
                                            const std::string& marker,
                                            const std::vector<std::string>& env = {}) {
  auto [pid, fd] = spawn(path, args, env);
  if (pid < 0) return {-1, ""};
  int fds[2] = {fd, -1};
  std::string out, word;
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (word.empty() && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[256];
    auto n = read(fds[0], buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    auto at = out.find(marker);
    if (at == std::string::npos) continue;
    auto from = at + marker.size();
    auto end = out.find_first_of(" \n", from);
    if (end != std::string::npos) word = out.substr(from, end - from);
  }
  close(fds[0]);
  return {pid, word};
}

// Starts the daemon on an ephemeral port; returns its pid and port (0 on failure).
inline std::pair<pid_t, uint16_t> start_daemon(const std::vector<std::string>& args) {
  auto [pid, word] = start_process(daemon_path(), args, "listening on 127.0.0.1:");
  return {pid, word.empty() ? uint16_t{0} : static_cast<uint16_t>(std::stoi(word))};
}

// Kills (and reaps) a child process whatever way the test leaves, so that nothing outlives it.
struct ChildGuard {
  pid_t pid = -1;
  ~ChildGuard() {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    kill(pid, SIGCONT);
    int status = 0;
    waitpid(pid, &status, 0);
  }
};

// Waits up to `limit` for the process to exit; returns its wait status, or -1 (then kills it).
inline int wait_exit(pid_t pid, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(10ms);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

// Reads everything `fd` delivers until EOF or the deadline, then closes it.
inline std::string read_all(int fd, std::chrono::steady_clock::time_point deadline) {
  std::string out;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    auto n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  close(fd);
  return out;
}

} // namespace chorus::testing
