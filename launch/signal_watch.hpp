// The signals chorus-run takes: blocked in every thread from the start (so the orchestrator's
// threads, started later, inherit the mask and never take one) and read from a signalfd by the
// supervisor's loop, with a child's end (SIGCHLD) among them.
#pragma once
#include <signal.h>

#include <array>

#include <chorus/result.hpp>

namespace chorus::launch {

// What chorus-run forwards to every process.
inline constexpr std::array<int, 6> kForwardedSignals{SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

struct SignalWatch {
  int fd = -1;               // the signalfd (non-blocking, close-on-exec)
  sigset_t child_mask{};     // the mask chorus-run was started with: its processes get it back
  bool sigpipe_ignored = false;  // whether SIGPIPE was ignored when chorus-run started
};

// Call before any thread starts. Blocks the forwarded signals and SIGCHLD, makes SIGCHLD's
// disposition the default (an inherited SIG_IGN would reap children before chorus-run could read
// their status) and ignores SIGPIPE (a closed stdout must not kill the supervisor).
Result<SignalWatch> watch_signals();

} // namespace chorus::launch
