// chorus-run's command line: what to start and how, read and checked before anything runs (a bad
// command line starts no orchestrator and no process).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/result.hpp>
#include "launch/placement.hpp"

namespace chorus::launch {

struct RunOptions {
  uint32_t processes = 0;                   // -n
  std::optional<uint32_t> peers;            // --peers: every process's CHORUS_PEERS
  std::vector<HostSlots> hosts;             // --hosts; empty: every process on this machine
  std::string secret_file;                  // --secret-file ("": CHORUS_SECRET, else a drawn one)
  std::optional<uint64_t> join_timeout_ms;  // --join-timeout-ms
  bool tag_output = false;                  // --tag-output
  std::string orchestrator_address;         // --orchestrator-address ("": this machine's name)
  bool help = false;                        // --help: print the usage and start nothing
  bool elastic = false;                     // --elastic: an elastic job (docs/elastic.md)
  std::string join_file;                    // --join-file: where --elastic writes how to join
  std::string join;                         // --join F: newcomers to the elastic job F names
  std::string program;
  std::vector<std::string> args;            // the program's own arguments
};

// Limits of the numbers: as many processes as the orchestrator admits nodes, as many peers as a
// process may have, and a join of at most a day.
inline constexpr uint32_t kMaxProcesses = 65536;
inline constexpr uint64_t kMaxJoinTimeoutMs = 24ull * 3600 * 1000;

// Options come before the program (`--` may end them); everything after it is the program's.
// Long options take `--name value` or `--name=value`; -n takes `-n N` or `-nN`. The error is one
// line naming the option ("bad -n 0 (1 to 65536)", "unknown option --foo").
Result<RunOptions> parse_run_options(const std::vector<std::string>& args);

// The text of --help.
std::string_view run_usage();

} // namespace chorus::launch
