// Starting one process: fork and exec with everything prepared before the fork (chorus-run has
// threads, so the child makes only async-signal-safe calls until exec), and an exec that fails
// told back through a close-on-exec pipe, so that "cannot run" is known before the next starts.
#pragma once
#include <signal.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include <chorus/result.hpp>

namespace chorus::launch {

struct SpawnRequest {
  std::string path;               // the program, as find_program found it
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> env;   // the whole environment, "NAME=value"
  enum class Input { inherit, null, pipe } input = Input::inherit;  // pipe: ssh's, for the secret and signals
  bool pipe_output = false;       // stdout and stderr on pipes of their own (--tag-output)
  sigset_t mask{};                // the signal mask the program starts with
  bool sigpipe_ignored = false;   // SIGPIPE's disposition for the program: ignored, else the default
  // The open-file limit the program starts with: chorus-run's own as it was given, before it
  // raised it for the orchestrator's connections (a program may rely on a small one, for select).
  rlimit nofile{RLIM_INFINITY, RLIM_INFINITY};
  bool restore_nofile = false;
};

struct Spawned {
  pid_t pid = -1;
  int in = -1;   // the write end of its stdin (Input::pipe; close-on-exec), else -1
  int out = -1;  // the read ends of its stdout and stderr (pipe_output; close-on-exec), else -1
  int err = -1;
};

// Starts it. The child has every descriptor above stderr closed at exec, and is killed when the
// thread that started it ends (PR_SET_PDEATHSIG), so that nothing outlives a killed chorus-run.
// Errors: invalid_argument when the program could not be run ("PROG: No such file or
// directory"; the child was reaped), internal when no pipe or process could be made.
Result<Spawned> spawn_process(const SpawnRequest& req);

} // namespace chorus::launch
