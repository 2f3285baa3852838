// Internal helpers shared by the per-algorithm schedule files (not public API): the global-step
// Plan that turns transfers into per-peer programs, element ranges, and pipelined trees.
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

#include "strategies/schedule.hpp"

namespace chorus::detail {

struct Range {
  std::size_t offset = 0;
  std::size_t count = 0;
};

// Part i of `whole` cut into `parts` contiguous parts whose sizes differ by at most one (the first
// whole.count % parts parts are the larger ones). Parts are empty when whole.count < parts.
inline Range split(Range whole, std::size_t parts, std::size_t i) {
  const std::size_t q = whole.count / parts, r = whole.count % parts;
  return {whole.offset + i * q + std::min(i, r), q + (i < r ? 1 : 0)};
}

// Pipeline chunks for `count` elements: about `chunk_bytes` each (ScheduleParams::chunk_bytes, the
// planner's), so that every hop of a chain or tree is busy at once; at least one, and never more
// than there are elements (so no chunk is empty unless count is 0).
inline std::size_t pipeline_chunks(std::size_t count, std::size_t elem_size, std::size_t chunk_bytes) {
  const std::size_t bytes = count * std::max<std::size_t>(elem_size, 1);
  const std::size_t part = std::max<std::size_t>(chunk_bytes, 1);
  const std::size_t chunks = (bytes + part - 1) / part;
  return std::clamp<std::size_t>(chunks, 1, std::max<std::size_t>(count, 1));
}

// Schedules are written as transfers tagged with a global step; Plan turns them into programs.
// A peer gets one round per step it takes part in: its sends of that step, then its receives and
// copies in the order they were added. Such a schedule cannot deadlock: once every peer has
// finished its rounds of the steps before t, all sends of step t get posted and every receive of
// step t finds its send (for each ordered pair, sends and receives are appended in the same order),
// so step t completes too. That a send of step t only needs the effects of earlier steps, and that
// no receive writes a region a send of the same step reads, stay the caller's job (the simulator
// checks both).
class Plan {
 public:
  // keep_empty: keep zero-element transfers (barrier); otherwise they are dropped, since moving no
  // data is needless synchronisation (e.g. the empty chunks of a ring when count < n).
  explicit Plan(int n, bool keep_empty = false)
      : entries_(static_cast<std::size_t>(n)), keep_empty_(keep_empty) {}

  // src sends its [src_off, +count) to dst, which reduces or copies it into its [dst_off, +count).
  void transfer(std::size_t step, int src, int dst, std::size_t src_off, std::size_t dst_off,
                std::size_t count, bool reduce) {
    if (count == 0 && !keep_empty_) return;
    add(src, step, Step{StepKind::send, dst, src_off, count});
    add(dst, step, Step{reduce ? StepKind::recv_reduce : StepKind::recv_copy, src, dst_off, count});
  }
  // The same range on both sides, the usual case since every peer has the same layout.
  void transfer(std::size_t step, int src, int dst, Range r, bool reduce) {
    transfer(step, src, dst, r.offset, r.offset, r.count, reduce);
  }
  void copy(std::size_t step, int peer, std::size_t src_off, std::size_t dst_off,
            std::size_t count) {
    if (count > 0) add(peer, step, Step{StepKind::copy, -1, dst_off, count, src_off});
  }

  // First step after everything added so far: where a following phase starts.
  std::size_t end() const { return end_; }

  std::vector<Program> build() const {
    std::vector<Program> programs(entries_.size());
    for (std::size_t p = 0; p < entries_.size(); ++p) {
      // By step, sends before the rest, otherwise in the order added (FIFO matching relies on it).
      std::vector<Entry> e = entries_[p];
      std::stable_sort(e.begin(), e.end(), [](const Entry& a, const Entry& b) {
        return a.at != b.at ? a.at < b.at : a.rank() < b.rank();
      });
      for (std::size_t i = 0; i < e.size(); ++i) {
        if (i == 0 || e[i].at != e[i - 1].at) programs[p].emplace_back();
        programs[p].back().steps.push_back(e[i].step);
      }
    }
    return programs;
  }

 private:
  struct Entry {
    std::size_t at;  // global step
    Step step;
    int rank() const { return step.kind == StepKind::send ? 0 : 1; }
  };
  void add(int peer, std::size_t step, const Step& st) {
    entries_[static_cast<std::size_t>(peer)].push_back(Entry{step, st});
    end_ = std::max(end_, step + 1);
  }

  std::vector<std::vector<Entry>> entries_;  // per peer, in the order added
  bool keep_empty_;
  std::size_t end_ = 0;
};

// A rooted tree over all peers. children[p] is in ascending peer order, which is also the order in
// which a parent combines its children's data (one fixed order: bit-identical floating point).
struct Tree {
  int root = 0;
  std::vector<int> parent;  // -1 for the root
  std::vector<std::vector<int>> children;
  std::vector<int> depth;
  int height = 0;  // largest depth
};

inline Tree tree_from_parents(int root, std::vector<int> parent) {
  Tree t;
  const int n = static_cast<int>(parent.size());
  t.root = root;
  t.children.resize(parent.size());
  t.depth.assign(parent.size(), -1);
  for (int p = 0; p < n; ++p)
    if (parent[p] >= 0) t.children[parent[p]].push_back(p);
  // Breadth-first from the root: parents get their depth before their children.
  std::vector<int> order{root};
  t.depth[root] = 0;
  for (std::size_t i = 0; i < order.size(); ++i)
    for (int c : t.children[order[i]]) {
      t.depth[c] = t.depth[order[i]] + 1;
      t.height = std::max(t.height, t.depth[c]);
      order.push_back(c);
    }
  t.parent = std::move(parent);
  return t;
}

// Pipelined reduce of `region` towards t.root and/or broadcast of it from t.root, cut into `chunks`
// chunks, starting at global step `base`; returns the step after the last one used.
// Chunk c goes up from a node of depth d at step base + c + (H - d) (H = height), so a node sends
// chunk c up in the step where it receives chunk c + 1 from its children; going down, chunk c
// leaves depth d at step base + c + d (+ H when it was reduced first). A node therefore always
// receives and sends chunks of different index in one step: up vs up differ by 1, down vs down by
// 1, up vs down by 2d +- 1, never 0. Each chunk is reduced once, at each node in children order.
inline std::size_t tree_pipeline(Plan& plan, const Tree& t, Range region, std::size_t chunks,
                                 bool reduce, bool broadcast, std::size_t base) {
  const std::size_t h = static_cast<std::size_t>(t.height);
  if (h == 0 || chunks == 0) return base;
  const std::size_t down_base = base + (reduce ? h : 0);
  const int n = static_cast<int>(t.parent.size());
  for (std::size_t c = 0; c < chunks; ++c) {
    const Range chunk = split(region, chunks, c);
    for (int p = 0; p < n; ++p) {
      if (t.parent[p] < 0) continue;
      const std::size_t d = static_cast<std::size_t>(t.depth[p]);
      if (reduce) plan.transfer(base + c + h - d, p, t.parent[p], chunk, true);
      if (broadcast) plan.transfer(down_base + c + d - 1, t.parent[p], p, chunk, false);
    }
  }
  return base + chunks - 1 + (reduce ? h : 0) + (broadcast ? h : 0);
}

// Per-algorithm builders, called by make_schedule after validation, never with all_to_all (always
// a direct exchange) nor with count 0 unless the op is barrier.
std::vector<Program> centralized_schedule(const ScheduleParams& p);
std::vector<Program> tree_schedule(const ScheduleParams& p);
std::vector<Program> ring_schedule(const ScheduleParams& p);
std::vector<Program> dbtree_schedule(const ScheduleParams& p);
std::vector<Program> direct_schedule(const ScheduleParams& p);
std::vector<Program> oneshot_schedule(const ScheduleParams& p);

} // namespace chorus::detail
