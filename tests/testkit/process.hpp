// Child processes for the multi-process tests and chorus-bench's --nodes launcher: start a program
// next to the running one (chorus-orchestrator, node processes) with its output on a pipe or
// inherited, read what it announces, wait for it with a limit, and leave nothing running behind.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace chorus::testkit {

// The running executable ("" when /proc/self/exe cannot be read), and a program in its directory.
std::string self_path();
std::string sibling(const std::string& name);

// Where a child's stdout (and stderr) go.
enum class Output { inherit, pipe, pipe_with_stderr };
// Where a child's stdin comes from: ours, or a pipe whose write end the parent holds (closing it
// is an end of file the child can wait for: a word from the parent, such as "you may exit now").
enum class Input { inherit, pipe };

struct Child {
  pid_t pid = -1;  // -1: fork or pipe failed (errno says why)
  int out = -1;    // the read end of the child's output with Output::pipe*, else -1
  int in = -1;     // the write end of the child's stdin with Input::pipe (close-on-exec), else -1
};

// Forks and runs `path` with `args` (argv[0] is `path`) and the extra environment `env`
// ("NAME=value" entries); its stdin per `input`. The child is killed when the *thread* that started it ends
// (PR_SET_PDEATHSIG), so nothing outlives a crashed parent: start children from a thread that
// outlives them. When exec fails the child says why on stderr and exits with status 127.
Child spawn(const std::string& path, const std::vector<std::string>& args, Output output = Output::inherit,
            const std::vector<std::string>& env = {}, Input input = Input::inherit);

// Waits until `deadline` for the first of `pids` (children of this process) to exit, sleeping on
// their pidfds: which one (an index into `pids`) and its wait status (-1: it could not be waited
// for), or nullopt while they all still run.
struct Exit {
  std::size_t index = 0;
  int status = -1;
};
std::optional<Exit> wait_any(const std::vector<pid_t>& pids, std::chrono::steady_clock::time_point deadline);
// Waits up to `limit` for `pid` to exit: its wait status, or nullopt while it still runs.
std::optional<int> wait_for(pid_t pid, std::chrono::milliseconds limit);
// The same, but a child still running after `limit` is killed: its wait status, or -1.
int wait_or_kill(pid_t pid, std::chrono::milliseconds limit);
// "exited with status 2", "was killed by signal 9 (Killed)".
std::string describe_status(int status);

// What a child printed up to `marker` and the word after it (up to a space or newline).
struct Announcement {
  std::string word;    // "" when the marker did not appear before EOF or the limit
  std::string output;  // everything read
};
// Reads `fd` until the announcement, EOF or `limit`; leaves `fd` open.
Announcement read_word_after(int fd, const std::string& marker, std::chrono::milliseconds limit);
// Reads everything `fd` delivers until EOF or `deadline`, then closes it.
std::string read_all(int fd, std::chrono::steady_clock::time_point deadline);

// Kills and reaps a child however its owner's scope is left.
struct ChildGuard {
  pid_t pid = -1;
  ~ChildGuard();
};

// chorus-orchestrator, as built next to the running program.
std::string orchestrator_path();

struct Orchestrator {
  pid_t pid = -1;     // -1 when it did not start
  uint16_t port = 0;  // where it listens
  std::string error;  // why it did not start, with what it printed
};
// Starts chorus-orchestrator with `args` (through `wrapper`, e.g. {"/usr/sbin/ip", "netns",
// "exec", ns}, when given) and waits up to `limit` for "listening on HOST:PORT". A daemon that
// does not announce its port is killed. Its later output is dropped (it ignores SIGPIPE).
Orchestrator start_orchestrator(const std::vector<std::string>& args,
                                std::chrono::milliseconds limit = std::chrono::seconds(20),
                                const std::vector<std::string>& wrapper = {});

} // namespace chorus::testkit
