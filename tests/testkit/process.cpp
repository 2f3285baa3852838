#include "testkit/process.hpp"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace chorus::testkit {

using Clock = std::chrono::steady_clock;

std::string self_path() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

std::string sibling(const std::string& name) {
  const std::string self = self_path();
  return self.substr(0, self.rfind('/')) + "/" + name;
}

namespace {

void close_pair(int (&fds)[2]) {
  for (int& fd : fds)
    if (fd >= 0) close(fd), fd = -1;
}

} // namespace

Child spawn(const std::string& path, const std::vector<std::string>& args, Output output,
            const std::vector<std::string>& env, Input input) {
  int fds[2] = {-1, -1};
  // The parent's end of stdin is close-on-exec: no later child may hold it, or closing it here
  // would not reach this child as an end of file.
  int ins[2] = {-1, -1};
  if (output != Output::inherit && pipe(fds) != 0) return {};
  if (input == Input::pipe && pipe2(ins, O_CLOEXEC) != 0) {
    const int e = errno;
    close_pair(fds);
    errno = e;
    return {};
  }
  // Buffered output would otherwise reach the terminal after the child's.
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    close_pair(fds);
    close_pair(ins);
    errno = e;
    return {};
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the parent is already gone
    if (fds[1] >= 0) {
      dup2(fds[1], STDOUT_FILENO);
      if (output == Output::pipe_with_stderr) dup2(fds[1], STDERR_FILENO);
      close(fds[0]);
      close(fds[1]);
    }
    if (ins[0] >= 0) dup2(ins[0], STDIN_FILENO);  // dup2 clears close-on-exec; both pipe ends go at exec
    for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> argv{const_cast<char*>(path.c_str())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(path.c_str(), argv.data());
    std::fprintf(stderr, "cannot run %s: %s\n", path.c_str(), std::strerror(errno));
    _exit(127);
  }
  if (fds[1] >= 0) close(fds[1]);
  if (ins[0] >= 0) close(ins[0]);
  return {pid, fds[0], ins[1]};
}

namespace {

// A descriptor that becomes readable when `pid` exits (Linux 5.3 and later), or -1.
int exit_fd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

} // namespace

std::optional<Exit> wait_any(const std::vector<pid_t>& pids, Clock::time_point deadline) {
  std::vector<pollfd> exits;
  for (pid_t pid : pids) exits.push_back({exit_fd(pid), POLLIN, 0});
  const bool every_fd = std::all_of(exits.begin(), exits.end(), [](const pollfd& p) { return p.fd >= 0; });
  std::optional<Exit> result;
  while (!result) {
    for (std::size_t i = 0; i < pids.size() && !result; ++i) {
      int status = 0;
      const pid_t r = waitpid(pids[i], &status, WNOHANG);
      if (r == pids[i]) result = Exit{i, status};
      else if (r < 0 && errno != EINTR) result = Exit{i, -1};
    }
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (result || left.count() <= 0) break;
    if (every_fd) {
      // Sleeps until a child exits (its pidfd turns readable) or the deadline.
      poll(exits.data(), exits.size(), static_cast<int>(std::min<int64_t>(left.count(), INT_MAX)));
    } else {
      // No pidfd (an old kernel): nothing signals the exit of a child another thread may also
      // wait for (SIGCHLD goes to the process), so look again in 10 ms.
      std::this_thread::sleep_for(std::min(left, std::chrono::milliseconds(10)));
    }
  }
  for (const pollfd& p : exits)
    if (p.fd >= 0) close(p.fd);
  return result;
}

std::optional<int> wait_for(pid_t pid, std::chrono::milliseconds limit) {
  const auto exit = wait_any({pid}, Clock::now() + limit);
  if (!exit) return std::nullopt;
  return exit->status;
}

int wait_or_kill(pid_t pid, std::chrono::milliseconds limit) {
  if (auto status = wait_for(pid, limit)) return *status;
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  return -1;
}

std::string describe_status(int status) {
  if (status == -1) return "could not be waited for";
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "ended with wait status " + std::to_string(status);
}

namespace {

// Appends what `fd` delivers within 100 ms to `out`; false once the other end closed (or on error).
bool read_some(int fd, std::string& out) {
  pollfd p{fd, POLLIN, 0};
  const int ready = poll(&p, 1, 100);
  if (ready <= 0) return ready == 0 || errno == EINTR;
  char buf[4096];
  const ssize_t n = read(fd, buf, sizeof(buf));
  if (n <= 0) return false;
  out.append(buf, static_cast<std::size_t>(n));
  return true;
}

} // namespace

Announcement read_word_after(int fd, const std::string& marker, std::chrono::milliseconds limit) {
  Announcement a;
  const auto deadline = Clock::now() + limit;
  // Until it announced, exited (or closed its output) without announcing, or the limit passed.
  while (Clock::now() < deadline && read_some(fd, a.output)) {
    const auto at = a.output.find(marker);
    if (at == std::string::npos) continue;
    const auto from = at + marker.size();
    const auto end = a.output.find_first_of(" \n", from);
    if (end == std::string::npos) continue;
    a.word = a.output.substr(from, end - from);
    break;
  }
  return a;
}

std::string read_all(int fd, Clock::time_point deadline) {
  std::string out;
  while (Clock::now() < deadline && read_some(fd, out)) {
  }
  close(fd);
  return out;
}

ChildGuard::~ChildGuard() {
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  kill(pid, SIGCONT);  // a stopped child dies only once it runs again
  int status = 0;
  waitpid(pid, &status, 0);
}

std::string orchestrator_path() { return sibling("chorus-orchestrator"); }

Orchestrator start_orchestrator(const std::vector<std::string>& args, std::chrono::milliseconds limit,
                                const std::vector<std::string>& wrapper) {
  Orchestrator r;
  std::string path = orchestrator_path();
  std::vector<std::string> argv = args;
  if (!wrapper.empty()) {
    argv.insert(argv.begin(), path);
    argv.insert(argv.begin(), wrapper.begin() + 1, wrapper.end());
    path = wrapper[0];
  }
  const Child child = spawn(path, argv, Output::pipe);
  if (child.pid < 0) {
    r.error = "cannot start " + path + ": " + std::strerror(errno);
    return r;
  }
  // "chorus-orchestrator listening on HOST:PORT for N nodes"
  const Announcement a = read_word_after(child.out, "listening on ", limit);
  close(child.out);
  const auto colon = a.word.rfind(':');
  if (colon != std::string::npos && colon + 1 < a.word.size()) {
    const long port = std::strtol(a.word.c_str() + colon + 1, nullptr, 10);
    if (port > 0 && port <= 65535) {
      r.pid = child.pid;
      r.port = static_cast<uint16_t>(port);
      return r;
    }
  }
  // Usually it has exited (a bad option); otherwise it hangs or printed something else.
  const auto status = wait_for(child.pid, std::chrono::seconds(1));
  if (!status) (void)wait_or_kill(child.pid, std::chrono::milliseconds(0));
  r.error = path + " did not announce its port" +
            (status ? " (it " + describe_status(*status) + ")"
                    : " within " + std::to_string(limit.count()) + " ms") +
            (a.output.empty() ? std::string() : "; it printed: " + a.output);
  return r;
}

} // namespace chorus::testkit
