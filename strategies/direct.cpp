// Direct ("one-shot") schedules: every peer talks to every other peer directly, in as few rounds
// as possible. Meant for shared memory, where a peer can read all its sources in one pass: within
// a round, all the recv_reduce steps into one region are consecutive and have the same
// (offset, count), so an executor may fuse them into one multi-source reduction.
//
// Combination order (the same on every peer, so floating-point results are deterministic): a
// region is reduced on exactly one peer, starting from that peer's own data (the destination's
// current content), then the other peers in ascending rank from 0, skipping itself. E.g. with
// 4 peers, peer 2 computes ((x2 + x0) + x1) + x3. This is also the centralized hub's order, so
// direct reduce is bit-identical to centralized reduce. Sends are posted in the order p+1, p+2,
// ... (mod n) so the peers do not all address the same one first; send order has no effect on
// results.
//
//   all_reduce      reduce-scatter over n near-equal parts (split, as ring): peer p sends part q
//                   to every q != p and reduces part p from every other peer; then all-gather: p
//                   sends its reduced part p to everyone and receives every part q. Parts larger
//                   than a pipeline chunk are cut into C chunks and the two phases overlap: step t
//                   reduces chunk t and gathers chunk t-1 (C+1 rounds; 2 when C = 1).
//                   Empty parts (count < n) have no transfers, so their owner has one round less.
//   reduce_scatter  round 0 of all_reduce over the n blocks.
//   all_gather      one round: my block to everyone, every other block from its owner.
//   reduce          one round: the root reduces the whole buffer from every other peer.
//   broadcast       one round: the root sends the whole buffer to every other peer.
//   gather/scatter  one round: the root receives/sends each block from/to its peer.
//   barrier         one round: a zero-size message from every peer to every other (n(n-1) messages,
//                   latency 1: every peer hears from every other directly).
// No round has a receive writing a region that a send of the same round reads: a peer sends
// only parts/blocks it does not receive in that round. Plan puts each peer's sends of a round
// before its receives, so the one-round all-to-all patterns cannot deadlock.
#include "strategies/schedule_builders.hpp"

namespace chorus::detail {
namespace {

// Every ordered pair (s, d), s != d, once, at global step `step`: s sends what(d) of its buffer
// to d, which reduces or copies it into the same region. Added sender by sender, receivers s+1,
// s+2, ... (mod n): each peer's sends are staggered, and each peer's receives end up in ascending
// sender order (for a fixed d, the pairs (s, d) are added in ascending s).
template <class RegionFn>
void all_pairs(Plan& plan, int n, std::size_t step, RegionFn what, bool reduce) {
  for (int s = 0; s < n; ++s)
    for (int k = 1; k < n; ++k) {
      const int d = (s + k) % n;
      plan.transfer(step, s, d, what(s, d), reduce);
    }
}

} // namespace

std::vector<Program> direct_schedule(const ScheduleParams& p) {
  const int n = p.n, root = p.root;
  const std::size_t count = p.count;
  const Range all{0, count};
  auto block = [&](int q) { return Range{static_cast<std::size_t>(q) * count, count}; };
  auto part = [&](int i) {
    return split(all, static_cast<std::size_t>(n), static_cast<std::size_t>(i));
  };

  Plan plan(n, p.op == OpKind::barrier);
  switch (p.op) {
    case OpKind::all_reduce: {
      // Part d is reduced on peer d, then d hands it to everyone. Large parts are cut into
      // pipeline chunks: in step t a peer reduces chunk t of its part while the others copy chunk
      // t-1 of it, which it has just written and which is likely still in the shared cache.
      const std::size_t chunks = pipeline_chunks(part(0).count, p.elem_size, p.chunk_bytes);
      auto chunk = [&](int q, std::size_t c) { return split(part(q), chunks, c); };
      for (std::size_t c = 0; c < chunks; ++c) {
        all_pairs(plan, n, c, [&](int, int d) { return chunk(d, c); }, true);
        all_pairs(plan, n, c + 1, [&](int s, int) { return chunk(s, c); }, false);
      }
      break;
    }
    case OpKind::reduce_scatter:
      all_pairs(plan, n, 0, [&](int, int d) { return block(d); }, true);
      break;
    case OpKind::all_gather:
      all_pairs(plan, n, 0, [&](int s, int) { return block(s); }, false);
      break;
    case OpKind::barrier:
      all_pairs(plan, n, 0, [](int, int) { return Range{}; }, false);
      break;
    case OpKind::reduce:  // root's receives in ascending rank
      for (int q = 0; q < n; ++q)
        if (q != root) plan.transfer(0, q, root, all, true);
      break;
    case OpKind::gather:
      for (int q = 0; q < n; ++q)
        if (q != root) plan.transfer(0, q, root, block(q), false);
      break;
    case OpKind::broadcast:  // root's sends staggered: root+1, root+2, ...
      for (int k = 1; k < n; ++k) plan.transfer(0, root, (root + k) % n, all, false);
      break;
    case OpKind::scatter:
      for (int k = 1; k < n; ++k) plan.transfer(0, root, (root + k) % n, block((root + k) % n), false);
      break;
    default: break;  // all_to_all, send, recv never get here
  }
  return plan.build();
}

} // namespace chorus::detail
