#include "launch/supervisor.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "launch/line_tagger.hpp"
#include "launch/signal_watch.hpp"
#include "launch/ssh_command.hpp"

namespace chorus::launch {

namespace {

using Clock = std::chrono::steady_clock;

// A remote process told KILL has this long before its ssh is killed: the line must get there first.
constexpr std::chrono::milliseconds kSshKillDelay{1000};
// After the last process ended, output its own children still hold open is read this long at most.
constexpr std::chrono::milliseconds kDrainLimit{1000};

void write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a closed stdout (SIGPIPE is ignored): the output is lost, the job goes on
    done += static_cast<std::size_t>(n);
  }
}

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// A terminal's Ctrl-C, Ctrl-\ or hang-up: the kernel sends it to the whole foreground process
// group, which the local processes share with chorus-run, so they have it already (a second one
// would make a program that ends gently on the first end at once). A signal from a process
// (kill, a scheduler) comes with SI_USER or SI_QUEUE.
bool from_terminal(int sig, int code) {
  return code == SI_KERNEL && (sig == SIGINT || sig == SIGQUIT || sig == SIGHUP);
}

std::string describe(int status) {
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "exited with status " + std::to_string(exit_code(status));
}

// One output stream of a process, under --tag-output.
struct Stream {
  int fd = -1;
  int to = -1;  // chorus-run's stdout or stderr
  LineTagger tagger;
  Stream(int fd, int to, uint32_t rank) : fd(fd), to(to), tagger(rank) {}
};

struct Process {
  ProcessPlan plan;
  pid_t pid = -1;
  bool running = false;
  int in = -1;  // a remote process's ssh stdin
  std::vector<Stream> streams;
};

class Supervision {
 public:
  Supervision(std::vector<ProcessPlan> plans, int signal_fd, bool tag_output, bool elastic)
      : sigfd_(signal_fd), tag_(tag_output), elastic_(elastic) {
    for (auto& p : plans) {
      procs_.emplace_back();
      procs_.back().plan = std::move(p);
    }
  }

  int run() {
    start_all();
    while (running_ > 0) {
      poll_once(next_deadline());
      const auto now = Clock::now();
      if (kill_at_ && now >= *kill_at_) kill_the_rest();
      if (ssh_kill_at_ && now >= *ssh_kill_at_) kill_remote_ssh();
    }
    const auto drain_until = Clock::now() + kDrainLimit;
    while (open_streams() > 0 && Clock::now() < drain_until) poll_once(drain_until);
    for (auto& p : procs_)
      for (auto& s : p.streams) close_stream(s);
    if (elastic_) return failure_ ? *failure_ : finished_ > 0 ? 0 : killed_.value_or(0);
    return failure_.value_or(0);
  }

 private:
  void start_all() {
    for (auto& p : procs_) {
      p.plan.request.pipe_output = tag_;
      auto spawned = spawn_process(p.plan.request);
      if (!spawned) {
        // The job cannot be whole: nothing more starts, and what started is ended.
        const bool exec_failed = spawned.status().code() == Errc::invalid_argument;
        failure_ = exec_failed ? 127 : 1;
        std::string line = exec_failed ? "chorus-run: cannot run " + spawned.status().message()
                                       : "chorus-run: cannot start rank " + std::to_string(p.plan.rank) + ": " +
                                             spawned.status().message();
        if (running_ > 0) line += "; ending the other " + count(running_);
        write_all(STDERR_FILENO, line + "\n");
        end_others();
        return;
      }
      p.pid = spawned->pid;
      p.running = true;
      ++running_;
      if (spawned->in >= 0) {
        write_all(spawned->in, p.plan.first_input);  // a few bytes into an empty pipe: no wait
        set_nonblocking(spawned->in);                // signal lines never block the loop
        p.in = spawned->in;
      }
      if (spawned->out >= 0) {
        set_nonblocking(spawned->out);
        set_nonblocking(spawned->err);
        p.streams.emplace_back(spawned->out, STDOUT_FILENO, p.plan.rank);
        p.streams.emplace_back(spawned->err, STDERR_FILENO, p.plan.rank);
      }
    }
  }

  static std::string count(std::size_t n) { return std::to_string(n) + (n == 1 ? " process" : " processes"); }

  std::optional<Clock::time_point> next_deadline() const {
    std::optional<Clock::time_point> d = kill_at_;
    if (ssh_kill_at_ && (!d || *ssh_kill_at_ < *d)) d = ssh_kill_at_;
    return d;
  }

  std::size_t open_streams() const {
    std::size_t n = 0;
    for (const auto& p : procs_)
      for (const auto& s : p.streams) n += s.fd >= 0;
    return n;
  }

  // Waits for a signal, output or the deadline, and handles what came.
  void poll_once(std::optional<Clock::time_point> deadline) {
    std::vector<pollfd> fds{{sigfd_, POLLIN, 0}};
    std::vector<Stream*> streams{nullptr};
    for (auto& p : procs_)
      for (auto& s : p.streams)
        if (s.fd >= 0) {
          fds.push_back({s.fd, POLLIN, 0});
          streams.push_back(&s);
        }
    int timeout = -1;
    if (deadline) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now()).count();
      timeout = static_cast<int>(std::max<int64_t>(0, left));
    }
    if (poll(fds.data(), fds.size(), timeout) <= 0) return;  // the deadline (signals are blocked: no EINTR)
    for (std::size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents != 0) pump(*streams[i]);
    if (fds[0].revents != 0) take_signals();
  }

  void take_signals() {
    signalfd_siginfo si{};
    bool child_ended = false;
    while (read(sigfd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
      const int sig = static_cast<int>(si.ssi_signo);
      if (sig == SIGCHLD) {
        child_ended = true;
      } else if (!from_terminal(sig, static_cast<int>(si.ssi_code))) {
        for (auto& p : procs_)
          if (p.running) send(p, sig);
      }
    }
    if (child_ended) reap();
  }

  void reap() {
    int status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      for (auto& p : procs_)
        if (p.running && p.pid == pid) ended(p, status);
    }
  }

  void ended(Process& p, int status) {
    p.running = false;
    --running_;
    if (p.in >= 0) close(p.in), p.in = -1;
    const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (elastic_) {  // a loss the others survive (they shrink): it ends nobody else
      if (!failed) ++finished_;
      else if (WIFSIGNALED(status) && !killed_) killed_ = exit_code(status);
      else if (!WIFSIGNALED(status) && !failure_) failure_ = exit_code(status);
      if (failed)
        write_all(STDERR_FILENO, "chorus-run: rank " + std::to_string(p.plan.rank) + " (host " + p.plan.host + ") " +
                                     describe(status) + "; the elastic job goes on with the others\n");
      return;
    }
    if (!failed || failure_) return;
    failure_ = exit_code(status);
    std::string line = "chorus-run: rank " + std::to_string(p.plan.rank) + " (host " + p.plan.host + ") " + describe(status);
    if (running_ > 0) line += "; ending the other " + count(running_);
    write_all(STDERR_FILENO, line + "\n");
    end_others();
  }

  void end_others() {
    for (auto& p : procs_)
      if (p.running) send(p, SIGTERM);
    if (running_ > 0) kill_at_ = Clock::now() + kGrace;
  }

  void send(Process& p, int sig) {
    if (!p.plan.remote) {
      kill(p.pid, sig);  // not reaped yet, so the pid is still this process's
      return;
    }
    // ssh does not carry signals: the remote watcher sends it (ssh_command.hpp). A full pipe (a
    // watcher that stopped reading) drops the line rather than stop this loop.
    const std::string line = signal_line(sig);
    if (p.in >= 0 && !line.empty()) (void)!write(p.in, line.data(), line.size());
  }

  void kill_the_rest() {
    kill_at_.reset();
    bool remote = false;
    for (auto& p : procs_) {
      if (!p.running) continue;
      send(p, SIGKILL);
      remote = remote || p.plan.remote;
    }
    if (remote) ssh_kill_at_ = Clock::now() + kSshKillDelay;
  }

  void kill_remote_ssh() {
    ssh_kill_at_.reset();
    for (auto& p : procs_)
      if (p.running && p.plan.remote) kill(p.pid, SIGKILL);
  }

  // Reads what one stream has (one read, so that a busy process cannot starve the others).
  void pump(Stream& s) {
    char buf[65536];
    const ssize_t n = read(s.fd, buf, sizeof buf);
    if (n > 0) {
      write_all(s.to, s.tagger.feed(std::string_view(buf, static_cast<std::size_t>(n))));
      return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    close_stream(s);  // its end (or an error)
  }

  void close_stream(Stream& s) {
    if (s.fd < 0) return;
    write_all(s.to, s.tagger.finish());
    close(s.fd);
    s.fd = -1;
  }

  std::vector<Process> procs_;
  int sigfd_;
  bool tag_;
  bool elastic_;
  std::size_t running_ = 0;
  std::size_t finished_ = 0;          // elastic: processes that exited with 0
  std::optional<int> killed_;         // elastic: the first one killed by a signal
  std::optional<int> failure_;  // the first failure's exit status
  std::optional<Clock::time_point> kill_at_, ssh_kill_at_;
};

} // namespace

int supervise(std::vector<ProcessPlan> plans, int signal_fd, bool tag_output, bool elastic) {
  return Supervision(std::move(plans), signal_fd, tag_output, elastic).run();
}

} // namespace chorus::launch
