// One-shot all-reduce: every peer sends its whole buffer to every other and folds all n buffers
// itself, so the op costs one network latency instead of a tree's 2 log n or a ring's 2(n-1). Over
// the network this adds no message the op does not already need: every node announces each op to
// every other node anyway (actors/global_client/net_op.hpp), and the data rides along with the announcement.
//
// Every peer folds in rank order, ((x0 (op) x1) (op) x2) ..., in the scratch half of its work
// buffer [count, 2*count), so the results are bit-identical on every peer for every reduce op
// (floats included: nothing relies on commutativity or associativity):
//   round 0: send my buffer to every other peer (staggered: me+1, me+2, ...); T = x0 (a receive,
//            or a local copy on peer 0); T = T (op) x_q for q = 1 .. n-1 in order, x_me by a local
//            reduce, the others as they arrive;
//   round 1: copy T into [0, count).
// No step of round 0 writes the region its sends read, and every receive is in the same round as
// its send, so the schedule is valid under memory semantics too (it is chosen across nodes, where
// its single exchange pays; within a process, direct and centralized move less).
#include "strategies/schedule_builders.hpp"

#include <stdexcept>

namespace chorus::detail {

std::vector<Program> oneshot_schedule(const ScheduleParams& p) {
  if (p.op != OpKind::all_reduce) throw std::invalid_argument("make_schedule: oneshot is for all_reduce only");
  const int n = p.n;
  const std::size_t c = p.count, t = p.count;  // t: where the fold T lives
  std::vector<Program> programs(static_cast<std::size_t>(n));
  if (c == 0 || n < 2) return programs;
  for (int me = 0; me < n; ++me) {
    Round exchange, result;
    for (int k = 1; k < n; ++k) exchange.steps.push_back(Step{StepKind::send, (me + k) % n, 0, c});
    for (int q = 0; q < n; ++q) {
      if (q == me) exchange.steps.push_back(Step{q == 0 ? StepKind::copy : StepKind::reduce, -1, t, c, 0});
      else exchange.steps.push_back(Step{q == 0 ? StepKind::recv_copy : StepKind::recv_reduce, q, t, c});
    }
    result.steps.push_back(Step{StepKind::copy, -1, 0, c, t});
    programs[me].push_back(std::move(exchange));
    programs[me].push_back(std::move(result));
  }
  return programs;
}

} // namespace chorus::detail
