// Work-buffer sizes, strategy names, and make_schedule: validation plus dispatch to the
// per-algorithm builders (centralized.cpp, tree.cpp, ring.cpp, dbtree.cpp, direct.cpp).
//
// What each (op, algorithm) does; "hub" is the op's root, or peer 0 for ops without one:
//   centralized  everything in to the hub (which reduces in ascending peer order) and back out.
//   tree:k       k-ary tree rooted at the hub. reduce/broadcast/all_reduce are pipelined in
//                ~512 KiB chunks; gather/scatter move whole subtrees; all_gather = gather + broadcast
//                of the whole buffer; reduce_scatter = reduce of the whole buffer + scatter;
//                barrier = zero-size reduce + broadcast.
//   ring         all_reduce = reduce-scatter + all-gather over n parts (empty parts when count < n
//                are skipped, no tree fallback); reduce_scatter/all_gather over the n blocks;
//                broadcast/reduce = pipelined chain from/to the root; gather/scatter = blocks
//                relayed along the chain; barrier = zero-size token over 2(n-1) hops.
//   dbtree       all_reduce/reduce/broadcast on two complementary binary trees, half the data each;
//                every other op is tree:2.
//   direct       every peer to every other in as few rounds as possible: all_reduce = one-round
//                reduce-scatter + one-round all-gather over n parts; reduce_scatter/all_gather one
//                round over the n blocks; rooted ops one round to/from the root; barrier one round
//                of zero-size messages between every pair. Reductions into one region are
//                consecutive steps of one round, in ascending source rank (fusable).
//   all_to_all   a direct pairwise exchange, whatever the algorithm.
//   count == 0   no messages at all (except barrier, which never has data).
#include "strategies/schedule.hpp"

#include <stdexcept>

#include "strategies/schedule_builders.hpp"

namespace chorus {

std::size_t work_elements(OpKind op, int n, std::size_t count) {
  const std::size_t blocks = static_cast<std::size_t>(n) * count;
  switch (op) {
    case OpKind::all_reduce: return 2 * count;  // the second half is scratch (see schedule.hpp)
    case OpKind::reduce:
    case OpKind::broadcast: return count;
    case OpKind::all_gather:
    case OpKind::reduce_scatter:
    case OpKind::gather:
    case OpKind::scatter: return blocks;
    case OpKind::all_to_all: return 2 * blocks;
    case OpKind::barrier: return 0;
    case OpKind::send:
    case OpKind::recv: return count;  // point-to-point: the message itself
  }
  return 0;
}

namespace {

// all_to_all is a direct pairwise exchange under every algorithm: each block has exactly one
// destination, so relaying it through a hub, tree or ring only adds traffic. One round per peer:
// copy its own block locally, post its n-1 sends (to p+1, p+2, ...), receive from p-1, p-2, ...
// so that the peers do not all wait on the same sender first.
std::vector<Program> all_to_all_direct(int n, std::size_t count) {
  detail::Plan plan(n);
  const std::size_t un = static_cast<std::size_t>(n), recv_area = un * count;
  for (int p = 0; p < n; ++p) {
    const std::size_t up = static_cast<std::size_t>(p);
    plan.copy(0, p, up * count, recv_area + up * count, count);
  }
  for (int s = 1; s < n; ++s)
    for (int p = 0; p < n; ++p) {
      const int to = (p + s) % n;
      plan.transfer(0, p, to, static_cast<std::size_t>(to) * count,
                    recv_area + static_cast<std::size_t>(p) * count, count, false);
    }
  return plan.build();
}

} // namespace

std::vector<Program> make_schedule(const ScheduleParams& p) {
  if (p.op == OpKind::send || p.op == OpKind::recv)
    throw std::invalid_argument("make_schedule: send/recv are point-to-point, not collectives");
  if (p.n < 1) throw std::invalid_argument("make_schedule: group size must be >= 1");
  if (p.root < 0 || p.root >= p.n)
    throw std::invalid_argument("make_schedule: root out of range");
  if (p.strategy.algorithm == Algorithm::tree && p.strategy.arity < 2)
    throw std::invalid_argument("make_schedule: tree arity must be >= 2");

  if (p.op == OpKind::all_to_all) return all_to_all_direct(p.n, p.count);
  // No data, nothing to do: a collective of zero elements does not synchronise (only barrier does).
  if (p.count == 0 && p.op != OpKind::barrier) return std::vector<Program>(p.n);

  switch (p.strategy.algorithm) {
    case Algorithm::centralized: return detail::centralized_schedule(p);
    case Algorithm::tree: return detail::tree_schedule(p);
    case Algorithm::ring: return detail::ring_schedule(p);
    case Algorithm::dbtree: return detail::dbtree_schedule(p);
    case Algorithm::direct: return detail::direct_schedule(p);
    case Algorithm::oneshot: return detail::oneshot_schedule(p);
    case Algorithm::nccl: break;  // no host schedule: the planner's rules resolve it for host data
  }
  throw std::invalid_argument("make_schedule: unknown algorithm");
}

} // namespace chorus
