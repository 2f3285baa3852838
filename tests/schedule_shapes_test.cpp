// The shape of each algorithm's schedules: who talks to whom (ring, centralized, tree, double
// binary tree), makespans, invalid parameters, names and work buffer sizes.
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <chorus/config.hpp>
#include "schedule_checks.hpp"

namespace chorus {
namespace {

using namespace testing;

TEST(Schedule, RingOnlyTalksToNeighbours) {
  for (OpKind op : kOps) {
    if (op == OpKind::all_to_all) continue;  // direct exchange under every algorithm
    for (int n : {2, 3, 9})
      for (const auto& [from, to] :
           edges(make_schedule({op, {Algorithm::ring, 2}, n, n - 1, 10, 4})))
        ASSERT_EQ(to, (from + 1) % n) << to_string(op) << " n=" << n;
  }
}

TEST(Schedule, CentralizedOnlyTalksToTheHub) {
  for (OpKind op : kOps) {
    if (op == OpKind::all_to_all) continue;
    const int hub = rooted(op) ? 3 : 0;
    for (const auto& [from, to] :
         edges(make_schedule({op, {Algorithm::centralized, 2}, 9, 3, 10, 4})))
      ASSERT_TRUE(from == hub || to == hub) << to_string(op);
  }
}

// A k-ary tree: no peer receives from more than k children when reducing.
TEST(Schedule, TreeArityBoundsChildren) {
  for (int k : {2, 3, 4, 7})
    for (int n : {5, 16, 50}) {
      const auto programs = make_schedule({OpKind::reduce, {Algorithm::tree, k}, n, 1, 10, 4});
      for (const Program& prog : programs) {
        std::set<int> children;
        for (const Round& round : prog)
          for (const Step& st : round.steps)
            if (st.kind == StepKind::recv_reduce) children.insert(st.peer);
        ASSERT_LE(children.size(), static_cast<std::size_t>(k)) << "k=" << k << " n=" << n;
      }
    }
}

// Double binary tree: apart from the root, no peer forwards data in both trees, and at most one
// peer (only when n is even) is a leaf in both.
TEST(Schedule, DoubleBinaryTreesAreComplementary) {
  for (int n = 3; n <= 40; ++n)
    for (int root : {0, n - 1}) {
      const std::size_t count = 100, half = 50;  // tree A carries [0, 50), tree B [50, 100)
      const auto programs = make_schedule({OpKind::broadcast, {Algorithm::dbtree, 2}, n, root, count, 4});
      int leaf_in_both = 0;
      for (int p = 0; p < n; ++p) {
        if (p == root) continue;
        bool forwards_a = false, forwards_b = false;
        for (const Round& round : programs[p])
          for (const Step& st : round.steps)
            if (st.kind == StepKind::send) (st.offset < half ? forwards_a : forwards_b) = true;
        ASSERT_FALSE(forwards_a && forwards_b) << "n=" << n << " peer " << p;
        leaf_in_both += !forwards_a && !forwards_b;
      }
      ASSERT_LE(leaf_in_both, n % 2 == 0 ? 1 : 0) << "n=" << n;
    }
}

// Direct all_reduce: C+1 rounds (reduce chunk t while gathering chunk t-1), C the pipeline chunks
// of one part; 2 when a part fits one chunk. Every other op: at most one round per peer.

TEST(Schedule, Makespans) {
  const int n = 8;
  auto makespan = [&](OpKind op, Strategy s, std::size_t count, std::size_t elem_size) {
    const ScheduleParams sp{op, s, n, 0, count, elem_size};
    const SimResult r = simulate(make_schedule(sp), initial_work(op, n, count));
    EXPECT_TRUE(r.ok()) << r.error;
    return r.makespan;
  };
  // Broadcast along a chain of 8 in 10 chunks: 7 hops for the first chunk, then 9 more steps.
  EXPECT_EQ(makespan(OpKind::broadcast, {Algorithm::ring, 2}, 10, 512 * 1024), 16u);
  EXPECT_EQ(makespan(OpKind::all_reduce, {Algorithm::ring, 2}, 64, 4), 14u);    // 2(n-1)
  EXPECT_EQ(makespan(OpKind::all_reduce, {Algorithm::tree, 2}, 64, 4), 6u);     // 2 * depth 3
  EXPECT_EQ(makespan(OpKind::all_reduce, {Algorithm::centralized, 2}, 64, 4), 2u);
  EXPECT_EQ(makespan(OpKind::all_to_all, {Algorithm::ring, 2}, 64, 4), 1u);
  EXPECT_EQ(makespan(OpKind::barrier, {Algorithm::ring, 2}, 0, 4), 14u);        // 2(n-1) hops
  // Direct: one message deep per round; all_reduce pipelines its two phases over the chunks of a
  // part (n = 8: 8 elements of 512 KiB make one-element parts, one chunk each: 2 rounds; 64 such
  // elements make 8 chunks per part: 9 rounds).
  EXPECT_EQ(makespan(OpKind::all_reduce, {Algorithm::direct, 2}, 8, 512 * 1024), 2u);
  EXPECT_EQ(makespan(OpKind::all_reduce, {Algorithm::direct, 2}, 64, 512 * 1024), 9u);
  EXPECT_EQ(makespan(OpKind::reduce_scatter, {Algorithm::direct, 2}, 64, 4), 1u);
  EXPECT_EQ(makespan(OpKind::all_gather, {Algorithm::direct, 2}, 64, 4), 1u);
  EXPECT_EQ(makespan(OpKind::reduce, {Algorithm::direct, 2}, 64, 512 * 1024), 1u);
  EXPECT_EQ(makespan(OpKind::broadcast, {Algorithm::direct, 2}, 64, 4), 1u);
  EXPECT_EQ(makespan(OpKind::barrier, {Algorithm::direct, 2}, 0, 4), 1u);
}

TEST(Schedule, RejectsInvalidParams) {
  const Strategy ring{Algorithm::ring, 2};
  EXPECT_THROW(make_schedule({OpKind::send, ring, 4, 0, 10, 4}), std::invalid_argument);
  EXPECT_THROW(make_schedule({OpKind::recv, ring, 4, 0, 10, 4}), std::invalid_argument);
  EXPECT_THROW(make_schedule({OpKind::all_reduce, ring, 0, 0, 10, 4}), std::invalid_argument);
  EXPECT_THROW(make_schedule({OpKind::reduce, ring, 4, 4, 10, 4}), std::invalid_argument);
  EXPECT_THROW(make_schedule({OpKind::reduce, ring, 4, -1, 10, 4}), std::invalid_argument);
  EXPECT_THROW(make_schedule({OpKind::reduce, {Algorithm::tree, 1}, 4, 0, 10, 4}),
               std::invalid_argument);
}

TEST(Schedule, NamesAndSizes) {
  EXPECT_EQ(to_string(Strategy{Algorithm::centralized, 2}), "centralized");
  EXPECT_EQ(to_string(Strategy{Algorithm::tree, 3}), "tree:3");
  EXPECT_EQ(to_string(Strategy{Algorithm::ring, 2}), "ring");
  EXPECT_EQ(to_string(Strategy{Algorithm::dbtree, 2}), "dbtree");
  EXPECT_EQ(to_string(Strategy{Algorithm::direct, 2}), "direct");
  const auto direct = parse_strategy("direct");
  ASSERT_TRUE(direct.has_value());
  EXPECT_EQ(*direct, (StrategyChoice{false, {Algorithm::direct, 2}}));
  EXPECT_EQ(to_string(*direct), "direct");
  EXPECT_FALSE(parse_strategy("direct:2").has_value());
  EXPECT_EQ(work_elements(OpKind::all_reduce, 4, 10), 20u);  // the second half is scratch
  EXPECT_EQ(work_elements(OpKind::reduce, 4, 10), 10u);
  EXPECT_EQ(work_elements(OpKind::broadcast, 4, 10), 10u);
  EXPECT_EQ(work_elements(OpKind::all_gather, 4, 10), 40u);
  EXPECT_EQ(work_elements(OpKind::reduce_scatter, 4, 10), 40u);
  EXPECT_EQ(work_elements(OpKind::gather, 4, 10), 40u);
  EXPECT_EQ(work_elements(OpKind::scatter, 4, 10), 40u);
  EXPECT_EQ(work_elements(OpKind::all_to_all, 4, 10), 80u);
  EXPECT_EQ(work_elements(OpKind::barrier, 4, 10), 0u);
}

} // namespace
} // namespace chorus
