// Double binary tree schedules (after NCCL): two binary trees, each carrying half of the data,
// shaped so that a peer that is a leaf in one is internal in the other. Both trees hang below the
// op's root (peer 0 for all_reduce) through a single edge each, so rooted ops need no relabelling
// after the fact. Only all_reduce, reduce and broadcast use them; every other op falls back to
// tree:2, where two trees bring nothing (gather/scatter/all_gather/reduce_scatter move distinct
// blocks, barrier moves no data).
#include "strategies/schedule_builders.hpp"

namespace chorus::detail {
namespace {

// The non-root peers get labels 1..m (m = n - 1, label = peer - root mod n; label 0 is the root).
// Tree A is the in-order tree NCCL builds with bit tricks: a label's parent has the next higher
// lowest set bit (clamped into range), so odd labels are leaves, even ones internal, and the
// largest power of two <= m hangs below the root. Tree B relabels A by phi, which maps odd labels
// to even ones, so leaves of A are internal in B: the mirror x -> m + 1 - x when m is even; when m
// is odd no such map exists and the shift x -> x % m + 1 leaves one peer (label 1) a leaf in both.
std::pair<Tree, Tree> make_trees(int n, int root) {
  const int m = n - 1;
  auto peer = [&](int label) { return (label + root) % n; };
  auto phi = [&](int x) { return x == 0 ? 0 : (m % 2 == 0 ? m + 1 - x : x % m + 1); };
  std::vector<int> pa(n, -1), pb(n, -1);
  for (int x = 1; x <= m; ++x) {
    const int bit = x & -x;
    int up = (x ^ bit) | (bit << 1);
    if (up > m) up = x ^ bit;  // 0 (the root) only for the top power of two
    pa[peer(x)] = peer(up);
    pb[peer(phi(x))] = peer(phi(up));
  }
  return {tree_from_parents(root, std::move(pa)), tree_from_parents(root, std::move(pb))};
}

} // namespace

std::vector<Program> dbtree_schedule(const ScheduleParams& p) {
  const bool up = p.op == OpKind::all_reduce || p.op == OpKind::reduce;
  const bool down = p.op == OpKind::all_reduce || p.op == OpKind::broadcast;
  if (!up && !down) {
    ScheduleParams fallback = p;
    fallback.strategy = Strategy{Algorithm::tree, 2};
    return tree_schedule(fallback);
  }
  const auto [a, b] = make_trees(p.n, p.op == OpKind::all_reduce ? 0 : p.root);
  // Tree A carries the first half, tree B the second; the halves are disjoint, so the two
  // pipelines can share rounds without one writing what the other sends.
  const Range half_a = split(Range{0, p.count}, 2, 0), half_b = split(Range{0, p.count}, 2, 1);
  Plan plan(p.n);
  tree_pipeline(plan, a, half_a, pipeline_chunks(half_a.count, p.elem_size, p.chunk_bytes), up, down, 0);
  tree_pipeline(plan, b, half_b, pipeline_chunks(half_b.count, p.elem_size, p.chunk_bytes), up, down, 0);
  return plan.build();
}

} // namespace chorus::detail
