// Ring schedules: peer p only ever sends to p + 1 and receives from p - 1 (mod n).
// all_reduce, reduce_scatter and all_gather cut the data into n parts so every link carries
// 1/n of it per step (bandwidth-optimal, 2(n-1) or n-1 steps). When count < n some parts are
// empty and their transfers are simply left out: the ring is kept, not replaced by a tree.
// Rooted ops run along the chain root -> root+1 -> ... (or towards the root the same way round).
#include "strategies/schedule_builders.hpp"

namespace chorus::detail {
namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

// Reduce-scatter around the ring: at step base + s peer q sends part (q - s - 1) and reduces part
// (q - s - 2) arriving from q - 1. Part i thus starts at peer i + 1, is reduced once at each peer
// along the way, and ends complete on peer i after n - 1 steps.
template <class PartFn>
std::size_t ring_reduce_scatter(Plan& plan, int n, PartFn part, std::size_t base) {
  for (int s = 0; s + 1 < n; ++s)
    for (int q = 0; q < n; ++q)
      plan.transfer(base + s, q, (q + 1) % n, part(mod(q - s - 1, n)), true);
  return base + static_cast<std::size_t>(n - 1);
}

// All-gather around the ring, starting with peer q owning part q: at step base + s peer q sends
// part (q - s) and receives part (q - s - 1).
template <class PartFn>
std::size_t ring_all_gather(Plan& plan, int n, PartFn part, std::size_t base) {
  for (int s = 0; s + 1 < n; ++s)
    for (int q = 0; q < n; ++q) plan.transfer(base + s, q, (q + 1) % n, part(mod(q - s, n)), false);
  return base + static_cast<std::size_t>(n - 1);
}

} // namespace

std::vector<Program> ring_schedule(const ScheduleParams& p) {
  const int n = p.n, root = p.root;
  const std::size_t count = p.count;
  const Range all{0, count};
  auto block = [&](int q) { return Range{static_cast<std::size_t>(q) * count, count}; };
  auto part = [&](int i) { return split(all, static_cast<std::size_t>(n), static_cast<std::size_t>(i)); };
  const std::size_t chunks = pipeline_chunks(count, p.elem_size, p.chunk_bytes);

  Plan plan(n, p.op == OpKind::barrier);
  switch (p.op) {
    case OpKind::all_reduce: {  // reduce-scatter then all-gather, over n near-equal parts
      const std::size_t next = ring_reduce_scatter(plan, n, part, 0);
      ring_all_gather(plan, n, part, next);
      break;
    }
    case OpKind::reduce_scatter: ring_reduce_scatter(plan, n, block, 0); break;
    case OpKind::all_gather: ring_all_gather(plan, n, block, 0); break;
    case OpKind::broadcast: {  // pipelined chain root -> root+1 -> ... -> root-1
      std::vector<int> parent(n, -1);
      for (int i = 1; i < n; ++i) parent[(root + i) % n] = (root + i - 1) % n;
      tree_pipeline(plan, tree_from_parents(root, std::move(parent)), all, chunks, false, true, 0);
      break;
    }
    case OpKind::reduce: {  // pipelined chain root+1 -> root+2 -> ... -> root
      std::vector<int> parent(n, -1);
      for (int q = 0; q < n; ++q)
        if (q != root) parent[q] = (q + 1) % n;
      tree_pipeline(plan, tree_from_parents(root, std::move(parent)), all, chunks, true, false, 0);
      break;
    }
    case OpKind::gather:
      // Chain root+1 -> ... -> root; position i = q - root - 1. Block of position j hops from
      // position h to h + 1 at step h - j, so each step a peer forwards the block it got in the
      // previous one while receiving the next: n - 1 steps, each link busy with one block.
      for (int j = 0; j + 1 < n; ++j)
        for (int h = j; h + 1 < n; ++h)
          plan.transfer(static_cast<std::size_t>(h - j), (root + 1 + h) % n, (root + 2 + h) % n,
                        block((root + 1 + j) % n), false);
      break;
    case OpKind::scatter:
      // Chain root -> root+1 -> ...; position i = q - root. The root sends the farthest block
      // first; the block of position j hops from h to h + 1 at step (n - 1 - j) + h, so all
      // blocks arrive at step n - 2 and a peer never receives the block it is forwarding.
      for (int j = 1; j < n; ++j)
        for (int h = 0; h < j; ++h)
          plan.transfer(static_cast<std::size_t>(n - 1 - j + h), (root + h) % n,
                        (root + h + 1) % n, block((root + j) % n), false);
      break;
    case OpKind::barrier:
      // A zero-size token 0 -> 1 -> ... -> n-1 (n-1 has now heard from all), then on around
      // n-1 -> 0 -> ... -> n-2 (everyone hears from n-1): 2(n-1) hops, twice around less two.
      for (int h = 0; h + 2 < 2 * n; ++h)
        plan.transfer(static_cast<std::size_t>(h), h % n, (h + 1) % n, Range{}, false);
      break;
    default: break;  // all_to_all, send, recv never get here
  }
  return plan.build();
}

} // namespace chorus::detail
