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
  return q.arena_slot > 0 && q.world && !q.root_from_data && arena_allowed(c, q.kind, q.arena_across_nodes);
}

// The most any peer posts into its slot (a rooted op's root posts more, or less, than the others).
std::size_t arena_need(const PlanQuery& q) {
  const auto n = static_cast<uint32_t>(std::max(1, q.topology.peers));
  const auto root = static_cast<uint32_t>(q.root);
  std::size_t most = 0;
  for (uint32_t rank : {root, (root + 1) % n})
    most = std::max(most, arena_input_bytes(ArenaOp{q.kind, q.dtype, q.redop, root, q.count, n, rank}));
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

void say(PlanDecision& d, const std::string& s) { d.why += (d.why.empty() ? "" : "; ") + s; }

std::string counted(std::size_t n, const char* what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); }

} // namespace

PlanDecision plan_op(const Config& config, const PlanQuery& q) {
  PlanDecision d;
  const bool across = !q.topology.shared_memory;
  if (p2p(q.kind)) {
    d.path = RunStrategy::of(RunStrategy::Path::p2p);
    d.staged = q.on_device && across;
    say(d, q.on_device ? (across ? "GPU tensors across nodes: staged through host memory, then a copy between the pair"
                                 : "GPU tensors of one process: a device copy between the pair")
                       : "a copy between the pair");
    return d;
  }
  if (q.on_device) {
    if (across) {
      if (arena_open(config, q) && q.arena_across_nodes) {
        d.first = RunStrategy::Path::cuda_ipc;
        say(d, "node processes sharing the GPU meet in the arena first (one lead's plan over every buffer)");
      }
      const StrategyChoice& choice = config.global[static_cast<std::size_t>(q.kind)];
      if (nccl_across_nodes(choice, q.kind, q.nccl_serves, q.topology)) {
        d.path = RunStrategy::of(RunStrategy::Path::nccl);
        say(d, "NCCL serves the op and every node has a GPU");
        return d;
      }
      d.staged = true;
      say(d, !auto_or_nccl(choice) ? "a host strategy is configured: staged through host memory"
             : !q.nccl_serves      ? "NCCL cannot serve the op: staged through host memory"
                                   : "some node has no GPU: staged through host memory");
      std::string why;
      d.path = tune(config, q.kind, q.dtype, q.count, q.topology, &why);
      say(d, why);
      count_schedule(q, d.path, d);
      return d;
    }
    if (arena_open(config, q)) {
      d.first = RunStrategy::Path::device;
      say(d, "peers of one process meet first; where their buffers lie on one GPU a lead runs the op");
    }
    // The local server's device run (actors/local_server/device_run.cpp): NCCL where the strategy
    // allows it, every peer has a GPU of its own and NCCL serves the op, else the on-device plan.
    if (auto_or_nccl(config.local[static_cast<std::size_t>(q.kind)]) && q.distinct_gpus && q.nccl_serves) {
      d.path = RunStrategy::of(RunStrategy::Path::nccl);
      say(d, "every peer on a GPU of its own and NCCL serves the op (unless a peer's input and output overlap "
             "other than in place: then the on-device plan)");
    } else {
      d.path = RunStrategy::of(RunStrategy::Path::device);
      say(d, !q.distinct_gpus ? "peers share a GPU: the on-device plan"
             : !q.nccl_serves ? "NCCL cannot serve the op: the on-device plan"
                              : "a host strategy is configured: the on-device plan");
    }
    return d;
  }
  if (arena_open(config, q)) {
    const std::size_t need = arena_need(q);
    if (need <= q.arena_slot) {
      d.first = RunStrategy::Path::arena;
      say(d, std::to_string(need) + " B fit the arena's slot of " + std::to_string(q.arena_slot) + " B");
    } else {
      say(d, std::to_string(need) + " B do not fit the arena's slot of " + std::to_string(q.arena_slot) + " B");
    }
  }
  std::string why;
  d.path = tune(config, q.kind, q.dtype, q.count, q.topology, &why);
  say(d, why);
  count_schedule(q, d.path, d);
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
