// Centralized schedules: every peer talks only to a hub, the op's root, or peer 0 for the ops
// without one. Two steps at most (in to the hub, out from it); the hub carries all the traffic.
#include "strategies/schedule_builders.hpp"

namespace chorus::detail {

std::vector<Program> centralized_schedule(const ScheduleParams& p) {
  const int n = p.n;
  const std::size_t count = p.count, un = static_cast<std::size_t>(n);
  const bool rooted = p.op == OpKind::reduce || p.op == OpKind::broadcast ||
                      p.op == OpKind::gather || p.op == OpKind::scatter;
  const int hub = rooted ? p.root : 0;
  const Range all{0, count}, whole{0, un * count};
  auto block = [&](int q) { return Range{static_cast<std::size_t>(q) * count, count}; };

  Plan plan(n, p.op == OpKind::barrier);
  // Step 0 goes in (the hub reduces in ascending peer order), step 1 goes out.
  for (int q = 0; q < n; ++q) {
    if (q == hub) continue;
    switch (p.op) {
      case OpKind::all_reduce:
        plan.transfer(0, q, hub, all, true);
        plan.transfer(1, hub, q, all, false);
        break;
      case OpKind::reduce: plan.transfer(0, q, hub, all, true); break;
      case OpKind::broadcast: plan.transfer(0, hub, q, all, false); break;
      case OpKind::gather: plan.transfer(0, q, hub, block(q), false); break;
      case OpKind::scatter: plan.transfer(0, hub, q, block(q), false); break;
      case OpKind::all_gather:
        // Gather, then send the whole buffer back: one message; q's own block is rewritten with
        // the same data.
        plan.transfer(0, q, hub, block(q), false);
        plan.transfer(1, hub, q, whole, false);
        break;
      case OpKind::reduce_scatter:
        plan.transfer(0, q, hub, whole, true);
        plan.transfer(1, hub, q, block(q), false);
        break;
      case OpKind::barrier:
        plan.transfer(0, q, hub, Range{}, false);
        plan.transfer(1, hub, q, Range{}, false);
        break;
      default: break;  // all_to_all, send, recv never get here
    }
  }
  return plan.build();
}

} // namespace chorus::detail
