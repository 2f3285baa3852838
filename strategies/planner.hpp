// The planner: one op, described once, and where its peers are, give one plan: where the op meets
// first (the arena), the path that runs it otherwise, the algorithm, its chunking, its rounds and
// messages, and why, in words. Its rules are four tables of data (plan_rules.hpp: where an op
// meets, what runs it, a host schedule's spread over nodes, its algorithm), the only place a
// choice is made; this reads them. The op path asks it at each of its two steps: a peer, before its op leaves it, where the op goes
// (plan_route: runtime/peer/run_op.cpp), and the local server, once the op's peers have met, what
// runs it (plan_path: the host schedule, NCCL or the on-device plan). plan_op is the two together
// with the reasons, as chorus-bench --explain prints them for each size.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include <chorus/config.hpp>

#include "core/log.hpp"
#include "core/op_desc.hpp"
#include "strategies/tuning.hpp"

namespace chorus {

// One op as the planner sees it: its description (the group's: the arena serves the world's ops
// alone), and where its peers are.
struct PlanQuery : OpDesc {
  PlanQuery() { kind = OpKind::all_reduce; }
  explicit PlanQuery(const OpDesc& op) : OpDesc(op) {}
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
  // Run first: the op meets in the arena and runs there, and takes `path` only where some peer
  // does not agree or is late (RunStrategy::Path::none: not there; an op too large for the arena's
  // slot still meets there, and all its peers see that it does not fit: `why` says so).
  RunStrategy::Path first = RunStrategy::Path::none;
  RunStrategy path;       // what runs the op otherwise
  bool staged = false;    // GPU tensors copied through host memory for a host schedule
  std::size_t rounds = 0;    // host schedules: the rounds of the longest peer's program
  std::size_t messages = 0;  // host schedules: sends of every peer together
  std::size_t largest_message = 0;  // host schedules: bytes (the chunking's bound, where it pipelines)
  std::string why;
};

// Where one peer's op goes before its peers have met (no words, no schedule: asked for every op).
struct Route {
  // Where the op meets first: the arena (host tensors), `device` (GPU tensors of the peers of one
  // process: a lead runs the op where they all lie on one GPU) or `cuda_ipc` (GPU tensors of node
  // processes sharing a GPU); none: nowhere. The meeting runs the op where every peer agrees, fits
  // and comes in time; else the op goes on as below.
  RunStrategy::Path meet = RunStrategy::Path::none;
  // GPU tensors across nodes copied through host memory for a host schedule (else the local
  // server takes them as they are, for NCCL).
  bool staged = false;
};
Route plan_route(const Config& config, const PlanQuery& query);

// What runs the op once every peer of this process has called (the local server): a host schedule
// (host tensors, or GPU tensors staged), NCCL, the on-device plan, or p2p. `why`, where given, is
// told the rules that decided. Cheap without `why`: no schedule is built.
RunStrategy plan_path(const Config& config, const PlanQuery& query, std::string* why = nullptr);

// GPU tensors of one process, once their peers have met: NCCL where the strategy of the level lets
// the runtime decide (auto or nccl) and NCCL takes every peer's buffers (`nccl_takes`: each on a
// GPU of its own, an op NCCL serves, no overlap but its in-place forms); else the on-device plan.
bool device_through_nccl(const StrategyChoice& choice, bool nccl_takes);

// A host schedule's parameters for an op of `peers` peers that `strategy` runs: the chunking is
// the planner's (kPipelineChunkBytes: pipelined algorithms cut their data into parts of about
// that many bytes, small enough to keep every hop busy, large enough to amortise a round).
ScheduleParams plan_schedule(const OpDesc& op, int peers, const RunStrategy& strategy);

// A send across nodes of `bytes` bytes: whether its data may go with its header (eager: where the
// receiving node's window has room for it, P2PMailbox::reserve) or waits for the receive's pull,
// which lands it straight in the receiving tensor for a round trip more: eager up to
// CHORUS_P2P_EAGER_MESSAGE_KIB.
bool plan_p2p_eager(std::size_t bytes);

// A send/recv pair of host tensors in one process, once paired (LocalServerCore::launch_pair):
// whether the second of the two to arrive copies it there and then (neither waits for the other's
// thread to wake: what small messages cost), or the receiver's thread copies it in a two-peer
// plan (its cache then holds the data it reads next: what large ones cost). At the pairing up to
// CHORUS_P2P_LOCAL_EAGER_KIB.
bool plan_pair_copy_at_pairing(std::size_t bytes);

// all_reduce_coalesced (runtime/peer/coalesced.cpp): the bytes it packs into one op of host
// tensors. Where that op meets in the arena, the arena's slot: the pack then runs as one arena op
// (a larger one would run as a schedule whose meetings, after a pause, cost more than packing
// saved: measured, docs/benchmarks.md). Elsewhere 1 MiB. Tensors of up to an eighth of it are
// packed; larger ones run alone.
std::size_t plan_pack_bytes(const Config& config, const PlanQuery& query);

// Both, with the reasons, the arena's fit and the schedule's rounds and messages (chorus-bench
// --explain, tests).
PlanDecision plan_op(const Config& config, const PlanQuery& query);

// At CHORUS_DEBUG=trace (subsystem op): "LABEL: planned NAME (rounds, messages...): why", what
// plan_op says of the op, as chorus-bench --explain words it. The local server says so for each
// host-schedule op of a shape it has not planned before (a schedule it compiles), not every op.
void log_plan(const Config& config, const PlanQuery& query, const LogWhere& where, const std::string& label);

// One line of chorus-bench --explain: "arena, else tree:2 (5 rounds, 6 messages): why".
std::string to_string(const PlanDecision& plan);

} // namespace chorus
