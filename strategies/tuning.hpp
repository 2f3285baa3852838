// The tuning module: what a plan is made of (RunStrategy: what runs an op; the host schedule a
// strategy runs), the facts about the peers' machines that the planner's rules read (crowding),
// and the arena's kinds and slot. The choices themselves are the planner's rules
// (plan_rules.hpp), the one place any is made; what the planner answers is what runs and what the
// op's reply reports (Peer::last_strategy(), chorus-bench's strategy column).
//
// Every node of an op must pick the same schedule, so the decision reads nothing but its
// arguments: the topology is plain data that every node has alike (the orchestrator's topology:
// nodes, their data addresses, hardware threads and GPUs), never a measurement of this machine.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <chorus/config.hpp>

#include "strategies/schedule.hpp"

namespace chorus {

// The runtime decides: auto, or nccl (NCCL where every peer is its own GPU, auto's choice for
// everything else, host tensors included).
inline bool auto_or_nccl(const StrategyChoice& c) { return c.is_auto || c.fixed.algorithm == Algorithm::nccl; }

// Where the peers of one op are.
struct Topology {
  int peers = 1;  // of the op (its group's size)
  // One process: every peer reads every other's buffer directly. Otherwise a network level (node
  // processes), described by the fields below.
  bool shared_memory = true;
  std::vector<uint32_t> rank_node;     // by rank of the op: its node
  std::vector<std::string> node_host;  // by node: its host (the orchestrator's grouping by host key)
  std::vector<unsigned> node_threads;  // by node: the hardware threads it registered with
  // By node: nodes with equal values share memory (one host, Config::host_transport automatic).
  // Empty: every node its own.
  std::vector<uint32_t> node_domain;
  std::vector<uint32_t> node_gpus;  // by node: the CUDA devices it registered with (0: none)
};

// What runs an op.
struct RunStrategy {
  enum class Path : uint8_t {
    none,      // nothing ran yet
    schedule,  // a host schedule from strategies/: `strategy`, flat or hierarchical
    p2p,       // send/recv: a copy between the pair
    nccl,      // GPU tensors on distinct GPUs, through NCCL (cuda/)
    device,    // GPU tensors, the on-device plan of cuda/device_plan.hpp
    arena,     // small host ops of peers sharing memory, one-shot in the arena (strategies/arena.hpp)
    cuda_ipc,  // GPU tensors of processes sharing a GPU: one lead's plan over them (gpu_arena_path)
  };
  Path path = Path::none;
  // Flat: the schedule over every peer of the op. Hierarchical: the schedule among one leader per
  // node (strategies/hierarchical.cpp runs it between the nodes' local phases), or per host
  // (`by_host`: the local phase spans the host's processes through shared memory).
  Strategy strategy{};
  bool hierarchical = false;
  bool by_host = false;
  bool operator==(const RunStrategy&) const = default;

  static constexpr RunStrategy flat(Strategy s) { return {Path::schedule, s, false, false}; }
  static constexpr RunStrategy among_leaders(Strategy s) { return {Path::schedule, s, true, false}; }
  static constexpr RunStrategy among_hosts(Strategy s) { return {Path::schedule, s, true, true}; }
  static constexpr RunStrategy of(Path p) { return {p, Strategy{}, false, false}; }
};

// "ring", "tree:2", "centralized", "direct", "oneshot", "hier+oneshot", "hosts+ring", "p2p",
// "nccl", "device", "arena", "cuda-ipc"; "" for none.
std::string to_string(const RunStrategy& s);
// A RunStrategy in one word (path, algorithm, the two flags, arity), for a field that calls on
// several threads may set at once: unpack_strategy(pack(s)) == s.
constexpr uint64_t pack(const RunStrategy& s) {
  return static_cast<uint64_t>(s.path) | static_cast<uint64_t>(s.strategy.algorithm) << 8 |
         static_cast<uint64_t>(s.hierarchical) << 16 | static_cast<uint64_t>(s.by_host) << 17 |
         static_cast<uint64_t>(static_cast<uint32_t>(s.strategy.arity)) << 32;
}
constexpr RunStrategy unpack_strategy(uint64_t w) {
  RunStrategy s;
  s.path = static_cast<RunStrategy::Path>(w & 0xff);
  s.strategy.algorithm = static_cast<Algorithm>((w >> 8) & 0xff);
  s.hierarchical = (w >> 16) & 1;
  s.by_host = (w >> 17) & 1;
  s.strategy.arity = static_cast<int>(static_cast<uint32_t>(w >> 32));
  return s;
}
static_assert(unpack_strategy(pack(RunStrategy{})) == RunStrategy{});
static_assert(unpack_strategy(pack(RunStrategy::among_hosts(Strategy{Algorithm::tree, 7}))) ==
              RunStrategy::among_hosts(Strategy{Algorithm::tree, 7}));

// Crowded small all-reduces across nodes go centralized (a star) up to this many peers (the
// planner's rule "star").
inline constexpr int kStarPeers = 8;

// The host schedule a RunStrategy of Path::schedule runs: flat over every peer, or hierarchical
// with the rank's node (by_host: its node's memory domain) as the local level.
std::vector<Program> schedule_of(const RunStrategy& strategy, const ScheduleParams& params, const Topology& topology);

// Whether the op's node processes crowd some machine: node processes of the op that share one
// machine outnumber its hardware threads, so every message costs CPU time they all wait for
// (the planner's fact `crowded`); false in shared memory.
bool crowded(const Topology& topology);

// The arena (strategies/arena.hpp): small ops of host tensors among peers that share memory (the
// threads of one process; the node processes of a job that lies on one host) meet in one region
// and run one-shot there, without the local server. Every peer posts its call there first; where
// they do not all agree and fit, or one is late, the op takes the ordinary path.
// The bytes a peer may post per op (its slot): CHORUS_ARENA_KIB (0: no arena), else 64 KiB, less
// where many peers share the arena (4 MiB of slots at most; never under 4 KiB).
std::size_t arena_slot_bytes(uint32_t peers);
// Whether ops of this kind use the arena under `config`: its strategy for the level is auto
// (`across_nodes`: the global one, else the local one); a fixed strategy is run as asked.
bool arena_allowed(const Config& config, OpKind kind, bool across_nodes);
// How long an arena op waits for its last peer before it takes the ordinary path, which words
// every error and long wait: the spin and yield of `patience_for`, then sleeping, 50 ms at most
// (CHORUS_ARENA_WAIT_MS), and never more than a quarter of the op's timeout.
std::chrono::milliseconds arena_wait(const Config& config);

} // namespace chorus
