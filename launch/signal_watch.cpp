#include "launch/signal_watch.hpp"

#include <sys/signalfd.h>

#include <cerrno>
#include <cstring>

namespace chorus::launch {

Result<SignalWatch> watch_signals() {
  SignalWatch w;
  sigset_t taken;
  sigemptyset(&taken);
  for (int sig : kForwardedSignals) sigaddset(&taken, sig);
  sigaddset(&taken, SIGCHLD);
  if (pthread_sigmask(SIG_BLOCK, &taken, &w.child_mask) != 0)
    return Status(Errc::internal, "cannot block signals");
  struct sigaction old{};
  sigaction(SIGPIPE, nullptr, &old);
  w.sigpipe_ignored = old.sa_handler == SIG_IGN;
  signal(SIGPIPE, SIG_IGN);
  signal(SIGCHLD, SIG_DFL);
  w.fd = signalfd(-1, &taken, SFD_NONBLOCK | SFD_CLOEXEC);
  if (w.fd < 0) return Status(Errc::internal, std::string("no signalfd: ") + std::strerror(errno));
  return w;
}

} // namespace chorus::launch
