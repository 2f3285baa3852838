#include "launch/spawn.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

namespace chorus::launch {

namespace {

struct Pipe {
  int r = -1, w = -1;
  bool open() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return false;
    r = fds[0];
    w = fds[1];
    return true;
  }
  void close_both() {
    if (r >= 0) ::close(r);
    if (w >= 0) ::close(w);
    r = w = -1;
  }
};

std::vector<char*> pointers(const std::vector<std::string>& strings) {
  std::vector<char*> p;
  for (const auto& s : strings) p.push_back(const_cast<char*>(s.c_str()));
  p.push_back(nullptr);
  return p;
}

// Every descriptor above stderr closes at exec: those of the orchestrator, the other processes'
// pipes (if one held another's output, that output would never end), and chorus-run's own.
void close_others_at_exec() {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return;
#endif
  const long max = sysconf(_SC_OPEN_MAX);
  for (int fd = 3; fd < (max > 0 && max < 65536 ? max : 65536); ++fd) fcntl(fd, F_SETFD, FD_CLOEXEC);
}

// Between fork and exec: async-signal-safe calls only.
[[noreturn]] void run_child(const SpawnRequest& req, pid_t parent, char* const* argv, char* const* envp,
                            const Pipe& in, const Pipe& out, const Pipe& err, int report) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // chorus-run is already gone
  if (req.input == SpawnRequest::Input::pipe) dup2(in.r, STDIN_FILENO);
  if (req.input == SpawnRequest::Input::null) {
    const int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, STDIN_FILENO);
  }
  if (req.pipe_output) {
    dup2(out.w, STDOUT_FILENO);
    dup2(err.w, STDERR_FILENO);
  }
  close_others_at_exec();
  if (req.restore_nofile) setrlimit(RLIMIT_NOFILE, &req.nofile);
  struct sigaction sa{};
  sa.sa_handler = req.sigpipe_ignored ? SIG_IGN : SIG_DFL;
  sigaction(SIGPIPE, &sa, nullptr);
  sigprocmask(SIG_SETMASK, &req.mask, nullptr);
  execve(req.path.c_str(), argv, envp);
  const int e = errno;
  (void)!write(report, &e, sizeof e);
  _exit(127);
}

} // namespace

Result<Spawned> spawn_process(const SpawnRequest& req) {
  auto argv = pointers(req.argv);
  auto envp = pointers(req.env);
  Pipe in, out, err, report;
  auto fail = [&](const char* what) {
    const int e = errno;
    for (Pipe* p : {&in, &out, &err, &report}) p->close_both();
    return Status(Errc::internal, std::string(what) + ": " + std::strerror(e));
  };
  if (req.input == SpawnRequest::Input::pipe && !in.open()) return fail("no pipe");
  if (req.pipe_output && (!out.open() || !err.open())) return fail("no pipe");
  if (!report.open()) return fail("no pipe");
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return fail("cannot fork");
  if (pid == 0) run_child(req, parent, argv.data(), envp.data(), in, out, err, report.w);

  ::close(report.w);
  report.w = -1;
  int exec_errno = 0;
  ssize_t n;
  do n = read(report.r, &exec_errno, sizeof exec_errno);  // 0 bytes: the exec closed it
  while (n < 0 && errno == EINTR);
  report.close_both();
  if (n == static_cast<ssize_t>(sizeof exec_errno)) {
    int status = 0;
    waitpid(pid, &status, 0);
    in.close_both();
    out.close_both();
    err.close_both();
    return Status(Errc::invalid_argument, req.argv.front() + ": " + std::strerror(exec_errno));
  }
  for (int child_end : {in.r, out.w, err.w})
    if (child_end >= 0) ::close(child_end);
  Spawned s;
  s.pid = pid;
  s.in = in.w;
  s.out = out.r;
  s.err = err.r;
  return s;
}

} // namespace chorus::launch
