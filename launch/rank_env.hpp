// The CHORUS_* variables chorus-run gives each process (what chorus::Config::from_env reads),
// torchrun's (so that torch.distributed's env:// works under chorus-run too), and a local
// process's whole environment: chorus-run's own with those on top.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launch/placement.hpp"

namespace chorus::launch {

using EnvVars = std::vector<std::pair<std::string, std::string>>;  // name, value

// What every process of the job is told alike.
struct JobEnv {
  uint32_t world_size = 0;
  std::optional<uint32_t> peers;
  std::string orchestrator;           // host:port
  std::optional<uint64_t> join_timeout_ms;
  std::string local_node_address;     // CHORUS_NODE_ADDRESS of the processes on this machine
  // torch.distributed's store (MASTER_ADDR, MASTER_PORT): rank 0's host and a port for it there.
  // Port 0: torchrun's variables are not set.
  std::string master_addr;
  uint16_t master_port = 0;
  EnvVars extra;  // CHORUS_ELASTIC, CHORUS_JOIN, ... for every process alike
};

// A process's variables, the secret aside: CHORUS_SECRET travels apart (in a local process's
// environment, on ssh's standard input for a remote one), so that it cannot reach a command line.
// A remote process's node address is its host's name as --hosts gives it.
EnvVars rank_env(const RankPlace& place, const JobEnv& job);

// `base` ("NAME=value" entries, as environ holds them) with `vars` replacing entries of the same
// names, `vars` last.
std::vector<std::string> merged_environment(const char* const* base, const EnvVars& vars);

} // namespace chorus::launch
