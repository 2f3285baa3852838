// The direct algorithm's schedules: round counts, fusable reductions, the order in which it
// combines, and one message per pair of peers.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "schedule_checks.hpp"

namespace chorus {
namespace {

using namespace testing;

TEST(Schedule, DirectRoundCounts) {
  const Strategy direct{Algorithm::direct, 2};
  for (int n = 1; n <= 16; ++n)
    for (std::size_t count : counts_for(n))
      for (OpKind op : kOps) {
        if (count == 0 && op != OpKind::barrier) continue;
        for (int root : roots_for(op, n)) {
          const ScheduleParams sp{op, direct, n, root, count, 8 * 1024};
          const auto programs = make_schedule(sp);
          for (int p = 0; p < n; ++p) {
            const std::size_t rounds = programs[p].size();
            if (n == 1) {  // all_to_all still copies its own block
              ASSERT_EQ(rounds, op == OpKind::all_to_all ? 1u : 0u) << describe(sp);
            } else if (op == OpKind::all_reduce) {
              const std::size_t part = (count + n - 1) / n;  // the largest part
              const std::size_t chunks = std::clamp<std::size_t>((part * sp.elem_size + (512 << 10) - 1) / (512 << 10), 1, part);
              if (count >= static_cast<std::size_t>(n)) ASSERT_EQ(rounds, chunks + 1) << describe(sp) << " peer " << p;
              else ASSERT_LE(rounds, chunks + 1) << describe(sp) << " peer " << p;
            } else if (op == OpKind::all_to_all || op == OpKind::reduce_scatter ||
                       op == OpKind::all_gather || op == OpKind::barrier || p == root) {
              ASSERT_EQ(rounds, 1u) << describe(sp) << " peer " << p;
            } else {
              ASSERT_LE(rounds, 1u) << describe(sp) << " peer " << p;
            }
          }
        }
      }
}

// Direct: within a round, the recv_reduce steps into one region are consecutive steps with the
// same (offset, count), from every other peer, in ascending source rank (so the executor can fuse
// them into one pass); distinct regions of a round do not overlap, and no region is reduced in two
// rounds (one pass per region per peer).
TEST(Schedule, DirectReductionsAreFusable) {
  const Strategy direct{Algorithm::direct, 2};
  for (OpKind op : {OpKind::all_reduce, OpKind::reduce_scatter, OpKind::reduce})
    for (int n = 1; n <= 16; ++n)
      for (int root : roots_for(op, n))
        for (std::size_t count : counts_for(n)) {
          const ScheduleParams sp{op, direct, n, root, count, 4};
          const auto programs = make_schedule(sp);
          const std::size_t un = static_cast<std::size_t>(n);
          for (int p = 0; p < n; ++p) {
            std::set<std::pair<std::size_t, std::size_t>> regions;  // (offset, count), all rounds
            for (const Round& round : programs[p]) {
              const auto& steps = round.steps;
              std::vector<std::pair<std::size_t, std::size_t>> runs;  // (offset, count) per run
              for (std::size_t i = 0; i < steps.size();) {
                if (steps[i].kind != StepKind::recv_reduce) { ++i; continue; }
                std::size_t j = i;
                std::vector<int> sources;
                while (j < steps.size() && steps[j].kind == StepKind::recv_reduce &&
                       steps[j].offset == steps[i].offset && steps[j].count == steps[i].count)
                  sources.push_back(steps[j++].peer);
                std::vector<int> want;
                for (int q = 0; q < n; ++q)
                  if (q != p) want.push_back(q);
                ASSERT_EQ(sources, want) << describe(sp) << " peer " << p;
                ASSERT_GT(steps[i].count, 0u) << describe(sp);
                runs.push_back({steps[i].offset, steps[i].count});
                ASSERT_TRUE(regions.insert(runs.back()).second)
                    << describe(sp) << " peer " << p << ": region reduced twice";
                i = j;
              }
              std::sort(runs.begin(), runs.end());
              for (std::size_t k = 1; k < runs.size(); ++k)
                ASSERT_LE(runs[k - 1].first + runs[k - 1].second, runs[k].first) << describe(sp);
            }
            // Who reduces what: all_reduce part p / reduce_scatter block p on peer p, reduce on root.
            const bool reducer = op != OpKind::reduce || p == root;
            if (n > 1 && reducer && static_cast<std::size_t>(p) < (op == OpKind::all_reduce ? count : count * un))
              ASSERT_EQ(regions.size(), 1u) << describe(sp) << " peer " << p;
            else
              ASSERT_TRUE(regions.empty()) << describe(sp) << " peer " << p;
          }
        }
}

// The documented combination order under the order-dependent combine: each region starts from its
// reducer's own data, then the other peers in ascending rank. all_reduce leaves every peer with the
// same bits, equal to that reference; reduce_scatter likewise; reduce matches centralized exactly.
TEST(Schedule, DirectCombinesInAscendingRank) {
  const Strategy direct{Algorithm::direct, 2};
  const SimOptions ordered = ordered_combine();
  auto combine = [](int64_t dst, int64_t in) {
    return static_cast<int64_t>(static_cast<uint64_t>(dst) * 1000003u +
                                static_cast<uint64_t>(in) + 1u);
  };
  auto reduced = [&](int owner, int n, std::size_t e) {
    int64_t d = value(owner, e);
    for (int q = 0; q < n; ++q)
      if (q != owner) d = combine(d, value(q, e));
    return d;
  };
  for (int n = 2; n <= 16; ++n)
    for (std::size_t count : counts_for(n)) {
      if (count == 0) continue;
      const std::size_t un = static_cast<std::size_t>(n);
      {  // all_reduce: element e belongs to the part of the split that contains it
        const ScheduleParams sp{OpKind::all_reduce, direct, n, 0, count, 4};
        const SimResult r = simulate(make_schedule(sp), initial_work(sp.op, n, count), ordered);
        ASSERT_TRUE(r.ok()) << describe(sp) << ": " << r.error;
        const std::size_t q = count / un, rem = count % un;
        for (std::size_t e = 0; e < count; ++e) {
          // Parts 0..rem-1 have q+1 elements, the rest q.
          const std::size_t owner = e < rem * (q + 1) ? e / (q + 1) : rem + (e - rem * (q + 1)) / q;
          const int64_t want = reduced(static_cast<int>(owner), n, e);
          for (int p = 0; p < n; ++p) ASSERT_EQ(r.work[p][e], want) << describe(sp) << " peer " << p << " e " << e;
        }
      }
      {  // reduce_scatter: block p on peer p
        const ScheduleParams sp{OpKind::reduce_scatter, direct, n, 0, count, 4};
        const SimResult r = simulate(make_schedule(sp), initial_work(sp.op, n, count), ordered);
        ASSERT_TRUE(r.ok()) << describe(sp) << ": " << r.error;
        for (int p = 0; p < n; ++p)
          for (std::size_t e = p * count; e < (p + 1) * count; ++e)
            ASSERT_EQ(r.work[p][e], reduced(p, n, e)) << describe(sp) << " peer " << p;
      }
      for (int root : roots_for(OpKind::reduce, n)) {  // reduce: same bits as centralized
        ScheduleParams sp{OpKind::reduce, direct, n, root, count, 4};
        const SimResult r = simulate(make_schedule(sp), initial_work(sp.op, n, count), ordered);
        sp.strategy = {Algorithm::centralized, 2};
        const SimResult c = simulate(make_schedule(sp), initial_work(sp.op, n, count), ordered);
        ASSERT_TRUE(r.ok() && c.ok()) << describe(sp) << ": " << r.error << c.error;
        ASSERT_EQ(r.work[root], c.work[root]) << describe(sp);
        for (std::size_t e = 0; e < count; ++e) ASSERT_EQ(r.work[root][e], reduced(root, n, e));
      }
    }
}

// Direct talks to every peer directly: all_gather/reduce_scatter/barrier send exactly one message
// along every ordered pair; all_reduce two (one per round) when count >= n.
TEST(Schedule, DirectTalksToEveryPeerOnce) {
  const Strategy direct{Algorithm::direct, 2};
  for (int n : {2, 3, 9, 16}) {
    for (OpKind op : {OpKind::all_gather, OpKind::reduce_scatter, OpKind::barrier, OpKind::all_reduce}) {
      const std::size_t count = op == OpKind::barrier ? 0 : static_cast<std::size_t>(n) + 3;
      auto e = edges(make_schedule({op, direct, n, 0, count, 4}));
      std::sort(e.begin(), e.end());
      std::vector<std::pair<int, int>> want;
      for (int s = 0; s < n; ++s)
        for (int d = 0; d < n; ++d)
          if (s != d)
            for (int k = 0; k < (op == OpKind::all_reduce ? 2 : 1); ++k) want.push_back({s, d});
      ASSERT_EQ(e, want) << to_string(op) << " n=" << n;
    }
  }
}

// Latency (one unit per message): pipelines and rings have the step counts their designs promise.

} // namespace
} // namespace chorus
