// What the schedule tests share: the ops and strategies they run, the groups, roots and counts of
// the full grid, deterministic per-peer values, and the reference check of an op's result
// (references computed here independently of the schedules).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "strategies/schedule.hpp"
#include "strategies/simulate.hpp"

namespace chorus {

// Readable parameters in gtest's messages (found by argument-dependent lookup, so in chorus).
inline void PrintTo(const Strategy& s, std::ostream* os) { *os << to_string(s); }
inline void PrintTo(OpKind op, std::ostream* os) { *os << to_string(op); }

namespace testing {

using PeerBuffers = std::vector<std::vector<int64_t>>;  // each peer's work buffer

inline constexpr OpKind kOps[] = {OpKind::all_reduce,     OpKind::reduce,     OpKind::broadcast,
                           OpKind::all_gather,     OpKind::reduce_scatter, OpKind::gather,
                           OpKind::scatter,        OpKind::all_to_all, OpKind::barrier};

inline const std::vector<Strategy> kScheduleStrategies = {
    {Algorithm::centralized, 2}, {Algorithm::tree, 2}, {Algorithm::tree, 3}, {Algorithm::tree, 4},
    {Algorithm::tree, 7},        {Algorithm::ring, 2}, {Algorithm::dbtree, 2},
    {Algorithm::direct, 2}};

// 4 bytes per element gives one pipeline chunk for every count used here; 8 KiB elements give
// chunks of about 64 elements (512 KiB), so pipelines run with many chunks of uneven sizes.
// OneElementChunks (schedule_results_test.cpp) covers the other extreme.
inline constexpr std::size_t kElemSizes[] = {4, 8 * 1024};

inline bool rooted(OpKind op) {
  return op == OpKind::reduce || op == OpKind::broadcast || op == OpKind::gather ||
         op == OpKind::scatter;
}

inline std::vector<int> roots_for(OpKind op, int n) {
  if (!rooted(op)) return {0};
  std::set<int> r{0, n - 1, n / 2};
  return {r.begin(), r.end()};
}

inline std::vector<std::size_t> counts_for(int n) {
  const std::size_t un = static_cast<std::size_t>(n);
  std::set<std::size_t> c{0, 1, un - 1, un, un + 1, 7, 1000, 1001};
  return {c.begin(), c.end()};
}

inline SimOptions ordered_combine() {
  SimOptions o;
  o.ordered_combine = true;
  return o;
}
inline SimOptions buffered_sends() {
  SimOptions o;
  o.buffered_sends = true;
  return o;
}

// Distinct per peer and element, so a lost, misplaced or double-counted contribution changes sums.
inline int64_t value(int peer, std::size_t e) {
  return (peer + 1) * int64_t{1000003} + static_cast<int64_t>(e) * 7 + 1;
}

inline PeerBuffers initial_work(OpKind op, int n, std::size_t count) {
  PeerBuffers w(static_cast<std::size_t>(n), std::vector<int64_t>(work_elements(op, n, count)));
  for (int p = 0; p < n; ++p)
    for (std::size_t e = 0; e < w[p].size(); ++e) w[p][e] = value(p, e);
  return w;
}

// The all_reduce result regions [0, count) of peers p and 0 hold the same bits (the second half
// of the work buffer is scratch).
inline bool same_result(const SimResult& r, int p, std::size_t count) {
  const auto c = static_cast<std::ptrdiff_t>(count);
  return std::equal(r.work[p].begin(), r.work[p].begin() + c, r.work[0].begin(), r.work[0].begin() + c);
}

inline std::string describe(const ScheduleParams& sp) {
  return std::string(to_string(sp.op)) + " " + to_string(sp.strategy) +
         " n=" + std::to_string(sp.n) + " root=" + std::to_string(sp.root) +
         " count=" + std::to_string(sp.count) + " elem_size=" + std::to_string(sp.elem_size);
}

// Compares the regions the op defines with references computed from value(); "" when all match.
inline std::string check_result(const ScheduleParams& sp, const SimResult& r) {
  const int n = sp.n, root = sp.root;
  const std::size_t count = sp.count, un = static_cast<std::size_t>(n);
  std::string bad;
  auto expect = [&](int p, std::size_t e, int64_t want) {
    if (bad.empty() && r.work[p][e] != want)
      bad = "peer " + std::to_string(p) + " element " + std::to_string(e) + " is " +
            std::to_string(r.work[p][e]) + ", expected " + std::to_string(want);
  };
  auto sum_over_peers = [&](std::size_t e) {
    int64_t s = 0;
    for (int q = 0; q < n; ++q) s += value(q, e);
    return s;
  };
  for (int p = 0; p < n && bad.empty(); ++p) {
    const std::size_t up = static_cast<std::size_t>(p);
    switch (sp.op) {
      case OpKind::all_reduce:
        for (std::size_t e = 0; e < count; ++e) expect(p, e, sum_over_peers(e));
        break;
      case OpKind::reduce:
        if (p == root)
          for (std::size_t e = 0; e < count; ++e) expect(p, e, sum_over_peers(e));
        break;
      case OpKind::broadcast:
        for (std::size_t e = 0; e < count; ++e) expect(p, e, value(root, e));
        break;
      case OpKind::all_gather:
        for (int q = 0; q < n; ++q)
          for (std::size_t e = q * count; e < (q + 1) * count; ++e) expect(p, e, value(q, e));
        break;
      case OpKind::reduce_scatter:
        for (std::size_t e = up * count; e < (up + 1) * count; ++e) expect(p, e, sum_over_peers(e));
        break;
      case OpKind::gather:
        if (p == root)
          for (int q = 0; q < n; ++q)
            for (std::size_t e = q * count; e < (q + 1) * count; ++e) expect(p, e, value(q, e));
        break;
      case OpKind::scatter:
        for (std::size_t e = up * count; e < (up + 1) * count; ++e) expect(p, e, value(root, e));
        break;
      case OpKind::all_to_all:
        for (int j = 0; j < n; ++j)
          for (std::size_t e = 0; e < count; ++e)
            expect(p, un * count + j * count + e, value(j, up * count + e));
        break;
      case OpKind::barrier:
        for (int q = 0; q < n; ++q)
          if (bad.empty() && !r.heard_from[p][q])
            bad = "peer " + std::to_string(p) + " finished without hearing from " +
                  std::to_string(q);
        break;
      default: bad = "unexpected op";
    }
  }
  return bad;
}

// Every message of a schedule, as (sender, receiver).
inline std::vector<std::pair<int, int>> edges(const std::vector<Program>& programs) {
  std::vector<std::pair<int, int>> out;
  for (int p = 0; p < static_cast<int>(programs.size()); ++p)
    for (const Round& round : programs[p])
      for (const Step& st : round.steps)
        if (st.kind == StepKind::send) out.push_back({p, st.peer});
  return out;
}

} // namespace testing
} // namespace chorus
