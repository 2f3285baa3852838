// Runs a job's processes to their end, by mpirun's rule: when one exits with a non-zero status or
// is killed by a signal, the others get SIGTERM, and SIGKILL once kGrace has passed; chorus-run
// exits with that first failure's status. Signals chorus-run receives are forwarded to every
// process (to a remote one as a line on its ssh's standard input, see ssh_command.hpp). With
// --tag-output, the processes' output comes through pipes and goes out line by line, tagged.
// One thread does all of it, in one poll loop over the signalfd and the pipes: no locks.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "launch/spawn.hpp"

namespace chorus::launch {

// From SIGTERM to SIGKILL for the processes that are still running.
inline constexpr std::chrono::milliseconds kGrace{5000};

struct ProcessPlan {
  uint32_t rank = 0;
  std::string host;         // as messages name it
  bool remote = false;      // started through ssh: signals go as lines on its standard input
  SpawnRequest request;     // its argv[0] names it in "cannot run PROG: ..."
  std::string first_input;  // written to its standard input at once (a remote one's secret line)
};

// Starts the processes in rank order and supervises them until every one has ended; returns
// chorus-run's exit status: 0 when all exited with 0, else the first failure's (its exit status,
// 128+N for signal N, 127 when the program could not be run, 1 when no process could be made).
// `signal_fd` is watch_signals()'s.
// `elastic` (chorus-run --elastic): a process that fails or is killed ends only itself (the others
// shrink and go on); the status is then 0 when no process exited with a failure of its own and
// one exited with 0, else the first such failure's (or the first signal's, when none exited).
int supervise(std::vector<ProcessPlan> plans, int signal_fd, bool tag_output, bool elastic = false);

} // namespace chorus::launch
