// SIGUSR1 writes every live flight recorder of the process. A signal handler may do almost
// nothing, so it writes one byte to a pipe; a thread of its own waits on the pipe and dumps.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <thread>
#include <vector>

#include "observability/flight/flight_recorder.hpp"
#include "core/log.hpp"

namespace chorus {

namespace {

int g_wake_fd = -1;  // the pipe's write end, for the handler

void on_signal(int) {
  const int saved = errno;
  char b = 1;
  [[maybe_unused]] auto n = ::write(g_wake_fd, &b, 1);  // full pipe: a dump is pending anyway
  errno = saved;
}

struct Watcher {
  std::mutex mu;
  std::vector<std::weak_ptr<FlightRecorder>> recorders;
  bool installed = false;
  std::function<void(const std::string&)> hook;

  void dump_all() {
    std::vector<std::shared_ptr<FlightRecorder>> live;
    std::function<void(const std::string&)> h;
    {
      std::lock_guard<std::mutex> lk(mu);
      h = hook;
      std::erase_if(recorders, [](const auto& w) { return w.expired(); });
      for (auto& w : recorders)
        if (auto r = w.lock()) live.push_back(std::move(r));
    }
    for (auto& r : live) {
      auto written = r->dump("SIGUSR1");
      // Asked for by hand: said whatever the log level, since nobody would know where to look.
      log_line(LogLevel::warn, Subsys::op, LogWhere{r->node(), -1, -1, -1},
               written ? "flight recorder written to " + *written
                       : "flight recorder not written: " + written.status().message());
      if (written && h) h(*written);
    }
  }

  // Runs for the rest of the process (detached: a dump may be under way at exit, harmlessly).
  static void run(int read_fd) {
    char buf[64];
    for (;;) {
      pollfd p{read_fd, POLLIN, 0};
      if (::poll(&p, 1, -1) < 0 && errno != EINTR) return;
      const ssize_t n = ::read(read_fd, buf, sizeof buf);  // several signals: one dump
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return;
      if (n > 0) instance().dump_all();
    }
  }

  static Watcher& instance() {
    static Watcher* w = new Watcher;  // never destroyed: the thread may outlive static destruction
    return *w;
  }
};

// Installs the handler unless the host app has one. False: SIGUSR1 is the host app's.
bool install(Watcher& w) {
  struct sigaction old {};
  if (::sigaction(SIGUSR1, nullptr, &old) != 0) return false;
  if ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) return false;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return false;
  g_wake_fd = fds[1];
  std::thread(Watcher::run, fds[0]).detach();
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (::sigaction(SIGUSR1, &sa, nullptr) != 0) return false;
  w.installed = true;
  return true;
}

} // namespace

void set_dump_signal_hook(std::function<void(const std::string&)> hook) {
  Watcher& w = Watcher::instance();
  std::lock_guard<std::mutex> lk(w.mu);
  w.hook = std::move(hook);
}

void watch_for_dump_signal(const std::shared_ptr<FlightRecorder>& recorder) {
  Watcher& w = Watcher::instance();
  std::lock_guard<std::mutex> lk(w.mu);
  static bool tried = false;
  if (!tried) {
    tried = true;
    if (!install(w))
      CHORUS_LOG(warn, init, LogWhere{}, "SIGUSR1 has a handler already: the flight recorder is not dumped on SIGUSR1");
  }
  if (!w.installed) return;
  std::erase_if(w.recorders, [](const auto& r) { return r.expired(); });  // runtimes come and go
  w.recorders.push_back(recorder);
}

} // namespace chorus
