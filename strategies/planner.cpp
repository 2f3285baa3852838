#include "strategies/planner.hpp"

#include <algorithm>

#include "strategies/arena_ops.hpp"
#include "strategies/schedule.hpp"

namespace chorus {

namespace {

bool p2p(OpKind k) { return k == OpKind::send || k == OpKind::recv; }

// Whether the op may meet in the arena at all: the world's op, not rooted by its data, of a kind
// whose strategy is auto at its level (arena_allowed), where an arena is mapped.
bool arena_open(const Config& c, const PlanQuery& q) {
  return q.arena_slot > 0 && q.group == 0 && !q.root_from_data && arena_allowed(c, q.kind, q.arena_across_nodes);
}

// The most any peer posts into its slot (a rooted op's root posts more, or less, than the others).
std::size_t arena_need(const PlanQuery& q) {
  const auto n = static_cast<uint32_t>(std::max(1, q.topology.peers));
  const auto root = static_cast<uint32_t>(q.root);
  std::size_t most = 0;
  for (uint32_t rank : {root, (root + 1) % n}) most = std::max(most, arena_input_bytes(ArenaOp{q, n, rank}));
  return most;
}

// The rounds and messages of the host schedule `s` runs (as the local server builds it).
void count_schedule(const PlanQuery& q, const RunStrategy& s, PlanDecision& d) {
  const ScheduleParams p{q.kind, s.strategy, q.topology.peers, q.root, q.count, dtype_size(q.dtype)};
  for (const Program& prog : schedule_of(s, p, q.topology)) {
    d.rounds = std::max(d.rounds, prog.size());
    for (const Round& r : prog)
      for (const Step& st : r.steps) d.messages += st.kind == StepKind::send ? 1 : 0;
  }
}

void say(std::string* why, const char* s) {
  if (why) *why += (why->empty() ? "" : "; ") + std::string(s);
}
void say(std::string* why, const std::string& s) { say(why, s.c_str()); }

std::string counted(std::size_t n, const char* what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); }

} // namespace

bool device_through_nccl(const StrategyChoice& choice, bool nccl_takes) { return auto_or_nccl(choice) && nccl_takes; }

Route plan_route(const Config& config, const PlanQuery& q) {
  Route r;
  const bool across = !q.topology.shared_memory;
  if (p2p(q.kind)) {
    r.staged = q.on_device && across;
    return r;
  }
  if (arena_open(config, q)) {
    if (!q.on_device) r.meet = RunStrategy::Path::arena;
    else if (!across) r.meet = RunStrategy::Path::device;
    else if (q.arena_across_nodes) r.meet = RunStrategy::Path::cuda_ipc;
  }
  if (q.on_device && across)
    r.staged = !nccl_across_nodes(config.global[static_cast<std::size_t>(q.kind)], q.kind, q.nccl_serves, q.topology);
  return r;
}

std::size_t plan_pack_bytes(const Config& config, const PlanQuery& q) {
  // The arena meets host ops only, and only with a slot (arena_open).
  return plan_route(config, q).meet == RunStrategy::Path::arena ? q.arena_slot : std::size_t{1} << 20;
}

RunStrategy plan_path(const Config& config, const PlanQuery& q, std::string* why) {
  const bool across = !q.topology.shared_memory;
  const auto k = static_cast<std::size_t>(q.kind);
  if (p2p(q.kind)) {
    say(why, q.on_device ? (across ? "GPU tensors across nodes: staged through host memory, then a copy between the pair"
                                   : "GPU tensors of one process: a device copy between the pair")
                         : "a copy between the pair");
    return RunStrategy::of(RunStrategy::Path::p2p);
  }
  if (q.on_device && !across) {
    // The local server's device run (actors/local_server/device_run.cpp).
    // NCCL takes no op of one rank (gpu::nccl_supports).
    const bool distinct = q.distinct_gpus && q.topology.peers >= 2;
    if (device_through_nccl(config.local[k], distinct && q.nccl_serves)) {
      say(why, "every peer on a GPU of its own and NCCL serves the op (unless a peer's input and output overlap "
               "other than in place: then the on-device plan)");
      return RunStrategy::of(RunStrategy::Path::nccl);
    }
    say(why, !distinct ? (q.topology.peers < 2 ? "one peer: the on-device plan" : "peers share a GPU: the on-device plan")
             : !q.nccl_serves ? "NCCL cannot serve the op: the on-device plan"
                              : "a host strategy is configured: the on-device plan");
    return RunStrategy::of(RunStrategy::Path::device);
  }
  if (q.on_device) {
    const StrategyChoice& choice = config.global[k];
    if (nccl_across_nodes(choice, q.kind, q.nccl_serves, q.topology)) {
      say(why, "NCCL serves the op and every node has a GPU");
      return RunStrategy::of(RunStrategy::Path::nccl);
    }
    say(why, !auto_or_nccl(choice) ? "a host strategy is configured: staged through host memory"
             : !q.nccl_serves      ? "NCCL cannot serve the op: staged through host memory"
                                   : "some node has no GPU: staged through host memory");
  }
  if (!why) return tune(config, q.kind, q.dtype, q.count, q.topology);
  std::string rule;
  const RunStrategy s = tune(config, q.kind, q.dtype, q.count, q.topology, &rule);
  say(why, rule);
  return s;
}

PlanDecision plan_op(const Config& config, const PlanQuery& q) {
  PlanDecision d;
  const Route r = plan_route(config, q);
  d.first = r.meet;
  d.staged = r.staged;
  switch (r.meet) {
    case RunStrategy::Path::cuda_ipc:
      say(&d.why, "node processes sharing the GPU meet in the arena first (one lead's plan over every buffer)");
      break;
    case RunStrategy::Path::device:
      say(&d.why, "peers of one process meet first; where their buffers lie on one GPU a lead runs the op");
      break;
    case RunStrategy::Path::arena: {
      // Every peer posts its call; where it does not fit the slot, all of them see so and go on.
      const std::size_t need = arena_need(q);
      const bool fits = need <= q.arena_slot;
      if (!fits) d.first = RunStrategy::Path::none;
      say(&d.why, std::to_string(need) + " B " + (fits ? "fit" : "do not fit") + " the arena's slot of " +
                      std::to_string(q.arena_slot) + " B");
      break;
    }
    default: break;
  }
  d.path = plan_path(config, q, &d.why);
  if (d.path.path == RunStrategy::Path::schedule) count_schedule(q, d.path, d);
  return d;
}

std::string to_string(const PlanDecision& d) {
  std::string s;
  if (d.first != RunStrategy::Path::none) s += to_string(RunStrategy::of(d.first)) + ", else ";
  s += to_string(d.path);
  if (d.staged) s += " (staged)";
  if (d.path.path == RunStrategy::Path::schedule)
    s += " (" + counted(d.rounds, "round") + ", " + counted(d.messages, "message") + ")";
  return s + ": " + d.why;
}

} // namespace chorus
