// The planner: one op, described once, and where its peers are, give one plan: where the op meets
// first (the arena), the path that runs it otherwise, the algorithm, its rounds and messages, and
// why, in words. Its rules are the tuning module's (tuning.hpp: the algorithm, NCCL or staging
// across nodes, the arena's kinds and slot), composed here in the order the op path applies them
// (runtime/peer/run_op.cpp asks them one at a time, the local server asks tune()), so what the
// planner says for an op is what runs it. chorus-bench --explain prints it for each size.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include <chorus/config.hpp>

#include "strategies/tuning.hpp"

namespace chorus {

// One op as the planner sees it.
struct PlanQuery {
  OpKind kind = OpKind::all_reduce;
  DType dtype = DType::f32;
  ReduceOp redop = ReduceOp::sum;
  int root = 0;
  std::size_t count = 0;        // elements per peer, in the sense of strategies/schedule.hpp
  bool on_device = false;       // GPU tensors
  bool world = true;            // the world's op: the arena serves no subgroup
  bool root_from_data = false;  // a broadcast or scatter whose root is found from the data: never in the arena
  // Where the peers are: threads of one process (topology.shared_memory), or node processes.
  Topology topology;
  // The arena the peers share (strategies/arena.hpp): the bytes each may post (0: none), and
  // whether it spans node processes of one host (else the threads of one process).
  std::size_t arena_slot = 0;
  bool arena_across_nodes = false;
  bool nccl_serves = false;  // NCCL has this op for the dtype and reduce op (cuda/'s gpu::nccl_serves)
  bool distinct_gpus = false;  // GPU tensors of one process: every peer's on a GPU of its own
};

struct PlanDecision {
  // Tried first: the op meets in the arena, and takes `path` only where some peer does not fit or
  // is late (RunStrategy::Path::none: not tried).
  RunStrategy::Path first = RunStrategy::Path::none;
  RunStrategy path;       // what runs the op otherwise
  bool staged = false;    // GPU tensors copied through host memory for a host schedule
  std::size_t rounds = 0;    // host schedules: the rounds of the longest peer's program
  std::size_t messages = 0;  // host schedules: sends of every peer together
  std::string why;
};

PlanDecision plan_op(const Config& config, const PlanQuery& query);

// One line of chorus-bench --explain: "arena, else tree:2 (5 rounds, 6 messages): why".
std::string to_string(const PlanDecision& plan);

} // namespace chorus
