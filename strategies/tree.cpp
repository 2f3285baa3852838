// k-ary tree schedules. The tree is over ranks relative to the root (x = (peer - root + n) % n)
// and every subtree is a contiguous range of relative ranks: node x owns [x, end[x]) and splits
// [x + 1, end[x]) into up to k nearly equal ranges, one per child. That keeps the depth at about
// log_k(n), like a heap-ordered tree, and lets gather/scatter move a whole subtree's blocks in at
// most two messages (two when the range wraps past peer n - 1).
#include "strategies/schedule_builders.hpp"

namespace chorus::detail {
namespace {

struct RangeTree {
  Tree tree;             // over peers
  std::vector<int> end;  // by relative rank: the subtree of x is [x, end[x])
};

RangeTree make_range_tree(int n, int k, int root) {
  std::vector<int> rel_parent(n, -1), end(n, n);
  std::vector<std::pair<int, int>> todo{{0, n}};
  while (!todo.empty()) {
    const auto [x, hi] = todo.back();
    todo.pop_back();
    end[x] = hi;
    const int rest = hi - x - 1, parts = std::min(k, rest);
    for (int i = 0, lo = x + 1; i < parts; ++i) {
      const int len = rest / parts + (i < rest % parts ? 1 : 0);
      rel_parent[lo] = x;
      todo.push_back({lo, lo + len});
      lo += len;
    }
  }
  std::vector<int> parent(n, -1);
  for (int x = 1; x < n; ++x) parent[(x + root) % n] = (rel_parent[x] + root) % n;
  return {tree_from_parents(root, std::move(parent)), std::move(end)};
}

// The blocks of relative ranks [lo, hi) as element ranges of the work buffer.
std::vector<Range> subtree_blocks(int lo, int hi, int n, int root, std::size_t count) {
  const int first = (lo + root) % n, len = hi - lo;
  auto blocks = [&](int from, int num) {
    return Range{static_cast<std::size_t>(from) * count, static_cast<std::size_t>(num) * count};
  };
  if (first + len <= n) return {blocks(first, len)};
  return {blocks(first, n - first), blocks(0, first + len - n)};
}

// Up the tree: a node of depth d sends its whole subtree's blocks to its parent at step
// base + H - d, after its children delivered theirs in the step before.
std::size_t gather_up(Plan& plan, const RangeTree& rt, int n, std::size_t count, std::size_t base) {
  const Tree& t = rt.tree;
  for (int x = 1; x < n; ++x) {
    const int peer = (x + t.root) % n;
    const std::size_t step = base + static_cast<std::size_t>(t.height - t.depth[peer]);
    for (const Range& r : subtree_blocks(x, rt.end[x], n, t.root, count))
      plan.transfer(step, peer, t.parent[peer], r, false);
  }
  return base + static_cast<std::size_t>(t.height);
}

// Down the tree: a parent of depth d hands each child its subtree's blocks at step base + d.
std::size_t scatter_down(Plan& plan, const RangeTree& rt, int n, std::size_t count,
                         std::size_t base) {
  const Tree& t = rt.tree;
  for (int x = 1; x < n; ++x) {
    const int peer = (x + t.root) % n;
    const std::size_t step = base + static_cast<std::size_t>(t.depth[peer] - 1);
    for (const Range& r : subtree_blocks(x, rt.end[x], n, t.root, count))
      plan.transfer(step, t.parent[peer], peer, r, false);
  }
  return base + static_cast<std::size_t>(t.height);
}

} // namespace

std::vector<Program> tree_schedule(const ScheduleParams& p) {
  const int n = p.n;
  const std::size_t un = static_cast<std::size_t>(n);
  const bool rooted = p.op == OpKind::reduce || p.op == OpKind::broadcast ||
                      p.op == OpKind::gather || p.op == OpKind::scatter;
  const RangeTree rt = make_range_tree(n, p.strategy.arity, rooted ? p.root : 0);
  const Range all{0, p.count}, whole{0, un * p.count};
  const std::size_t chunks = pipeline_chunks(p.count, p.elem_size, p.chunk_bytes);
  const std::size_t whole_chunks = pipeline_chunks(whole.count, p.elem_size, p.chunk_bytes);

  Plan plan(n, p.op == OpKind::barrier);
  switch (p.op) {
    case OpKind::all_reduce:  // reduce to peer 0, broadcast back, pipelined together
      tree_pipeline(plan, rt.tree, all, chunks, true, true, 0);
      break;
    case OpKind::reduce: tree_pipeline(plan, rt.tree, all, chunks, true, false, 0); break;
    case OpKind::broadcast: tree_pipeline(plan, rt.tree, all, chunks, false, true, 0); break;
    case OpKind::gather: gather_up(plan, rt, n, p.count, 0); break;
    case OpKind::scatter: scatter_down(plan, rt, n, p.count, 0); break;
    case OpKind::all_gather: {  // gather to peer 0, then broadcast the whole buffer
      const std::size_t next = gather_up(plan, rt, n, p.count, 0);
      tree_pipeline(plan, rt.tree, whole, whole_chunks, false, true, next);
      break;
    }
    case OpKind::reduce_scatter: {  // reduce the whole buffer to peer 0, then scatter the blocks
      const std::size_t next = tree_pipeline(plan, rt.tree, whole, whole_chunks, true, false, 0);
      scatter_down(plan, rt, n, p.count, next);
      break;
    }
    case OpKind::barrier:  // zero-size reduce up then broadcast down: everyone hears from all
      tree_pipeline(plan, rt.tree, Range{}, 1, true, true, 0);
      break;
    default: break;  // all_to_all, send, recv never get here
  }
  return plan.build();
}

} // namespace chorus::detail
