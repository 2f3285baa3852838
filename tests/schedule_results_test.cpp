// Schedules of every (op, algorithm) run through the simulator and compared with references
// computed independently (schedule_checks.hpp): the full grid of groups, roots and counts, one
// element per pipeline chunk, bit-identical all_reduce results, one-shot and hierarchical
// schedules, causal reach, determinism, barriers and larger groups.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "schedule_checks.hpp"

namespace chorus {
namespace {

using namespace testing;

class ScheduleTest : public ::testing::TestWithParam<std::tuple<OpKind, Strategy>> {};

// The full grid: every n, root and count, both chunkings; stops at the first failure.
TEST_P(ScheduleTest, MatchesReference) {
  const auto [op, strategy] = GetParam();
  for (int n = 1; n <= 16; ++n)
    for (int root : roots_for(op, n))
      for (std::size_t count : counts_for(n))
        for (std::size_t elem_size : kElemSizes) {
          const ScheduleParams sp{op, strategy, n, root, count, elem_size};
          const auto programs = make_schedule(sp);
          ASSERT_EQ(programs.size(), static_cast<std::size_t>(n)) << describe(sp);
          const SimResult r = simulate(programs, initial_work(op, n, count));
          ASSERT_TRUE(r.ok()) << describe(sp) << ": " << r.error;
          const std::string bad = check_result(sp, r);
          ASSERT_TRUE(bad.empty()) << describe(sp) << ": " << bad;
          if (op == OpKind::barrier) {
            ASSERT_EQ(r.elements_sent, 0u) << describe(sp);
          } else if (count == 0) {
            ASSERT_EQ(r.messages, 0u) << describe(sp);
          }
        }
}

// Elements bigger than a pipeline chunk: one element per chunk (the most chunks there can be).
TEST_P(ScheduleTest, OneElementChunks) {
  const auto [op, strategy] = GetParam();
  for (int n = 1; n <= 16; ++n)
    for (int root : roots_for(op, n))
      for (std::size_t count : {std::size_t{1}, std::size_t{3}, static_cast<std::size_t>(n) + 1}) {
        const ScheduleParams sp{op, strategy, n, root, count, std::size_t{1} << 20};
        const SimResult r = simulate(make_schedule(sp), initial_work(op, n, count));
        ASSERT_TRUE(r.ok()) << describe(sp) << ": " << r.error;
        ASSERT_EQ(check_result(sp, r), "") << describe(sp);
      }
}

std::string param_name(const ::testing::TestParamInfo<ScheduleTest::ParamType>& info) {
  std::string s = std::string(to_string(std::get<0>(info.param))) + "_" +
                  to_string(std::get<1>(info.param));
  std::replace(s.begin(), s.end(), ':', '_');
  return s;
}

INSTANTIATE_TEST_SUITE_P(AllOpsAllAlgorithms, ScheduleTest,
                         ::testing::Combine(::testing::ValuesIn(kOps),
                                            ::testing::ValuesIn(kScheduleStrategies)),
                         param_name);

// With a combine that depends on order and grouping, all_reduce must still leave every peer with
// the same bits: each chunk is reduced once, in one order, then distributed.
TEST(Schedule, AllReduceIsBitIdenticalAcrossPeers) {
  for (const Strategy& strategy : kScheduleStrategies)
    for (int n = 2; n <= 16; ++n)
      for (std::size_t count : {std::size_t{1}, static_cast<std::size_t>(n) + 1, std::size_t{1001}})
        for (std::size_t elem_size : kElemSizes) {
          const ScheduleParams sp{OpKind::all_reduce, strategy, n, 0, count, elem_size};
          const SimResult r = simulate(make_schedule(sp), initial_work(sp.op, n, count),
                                       ordered_combine());
          ASSERT_TRUE(r.ok()) << describe(sp) << ": " << r.error;
          for (int p = 1; p < n; ++p) ASSERT_TRUE(same_result(r, p, count)) << describe(sp) << " peer " << p;
        }
}

// Round has no operator== (schedule.hpp), so compare step by step.
bool same_schedule(const std::vector<Program>& a, const std::vector<Program>& b) {
  auto same_round = [](const Round& x, const Round& y) { return x.steps == y.steps; };
  auto same_program = [&](const Program& x, const Program& y) {
    return std::equal(x.begin(), x.end(), y.begin(), y.end(), same_round);
  };
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), same_program);
}

// One-shot: right under memory and network semantics for every size of group, one message of
// latency, n(n-1) messages, and bit-identical on every peer with an order-dependent combine
// (every peer folds all buffers in rank order).
TEST(Schedule, OneShotAllReduce) {
  for (int n = 1; n <= 9; ++n)
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{300}}) {
      const ScheduleParams sp{OpKind::all_reduce, Strategy{Algorithm::oneshot, 2}, n, 0, count, 4};
      const auto programs = make_schedule(sp);
      for (const SimOptions& o : {SimOptions{}, buffered_sends()}) {
        const SimResult r = simulate(programs, initial_work(sp.op, n, count), o);
        ASSERT_TRUE(r.ok()) << describe(sp) << ": " << r.error;
        EXPECT_EQ(check_result(sp, r), "") << describe(sp);
        EXPECT_EQ(r.makespan, count && n > 1 ? 1u : 0u) << describe(sp);
        EXPECT_EQ(r.messages, count ? static_cast<std::size_t>(n * (n - 1)) : 0u) << describe(sp);
      }
      const SimResult r = simulate(programs, initial_work(sp.op, n, count), ordered_combine());
      ASSERT_TRUE(r.ok()) << describe(sp) << ": " << r.error;
      for (int p = 1; p < n; ++p)
        ASSERT_TRUE(same_result(r, p, count)) << describe(sp) << " peer " << p;
    }
  EXPECT_THROW(make_schedule({OpKind::broadcast, Strategy{Algorithm::oneshot, 2}, 2, 0, 4, 4}), std::invalid_argument);
}

// Hierarchical schedules: right (and, for all_reduce, bit-identical on every peer) for contiguous,
// uneven and interleaved node layouts, every root and every inner strategy, under memory semantics
// (the local phases run between threads of one process); only leaders talk across nodes.
TEST(Schedule, Hierarchical) {
  const std::vector<std::vector<int>> layouts = {
      {0, 0, 1, 1, 2, 2}, {0, 1, 1, 1, 2, 2}, {0, 1, 0, 1}, {5, 5, 5, 2}, {0, 0, 0, 0, 1}, {3, 1, 2}};
  for (OpKind op : {OpKind::all_reduce, OpKind::reduce, OpKind::broadcast, OpKind::all_gather, OpKind::reduce_scatter})
    for (const auto& node_of : layouts)
      for (const Strategy& inner : kScheduleStrategies)
        for (int root = 0; root < static_cast<int>(node_of.size()); ++root)
          for (std::size_t count : {std::size_t{1}, std::size_t{1001}}) {
            const bool rooted = op == OpKind::reduce || op == OpKind::broadcast;
            if (!rooted && root > 0) continue;
            const int n = static_cast<int>(node_of.size());
            const ScheduleParams sp{op, inner, n, root, count, 4};
            const auto programs = hierarchical_schedule(sp, node_of);
            std::string what = describe(sp) + " layout";
            for (int x : node_of) what += " " + std::to_string(x);
            const SimResult r = simulate(programs, initial_work(sp.op, n, count));
            ASSERT_TRUE(r.ok()) << what << ": " << r.error;
            ASSERT_EQ(check_result(sp, r), "") << what;
            if (op == OpKind::all_reduce) {
              const SimResult o = simulate(programs, initial_work(sp.op, n, count), ordered_combine());
              ASSERT_TRUE(o.ok()) << what << ": " << o.error;
              for (int p = 1; p < n; ++p) ASSERT_TRUE(same_result(o, p, count)) << what << " peer " << p;
            }
            // Across nodes only leaders talk: the root on its node, the lowest rank elsewhere.
            auto is_leader = [&](int q) {
              if (rooted && node_of[q] == node_of[root]) return q == root;
              for (int e = 0; e < q; ++e)
                if (node_of[e] == node_of[q]) return false;
              return true;
            };
            for (int p = 0; p < n; ++p)
              for (const Round& round : programs[p])
                for (const Step& s : round.steps) {
                  if (node_of[s.peer] == node_of[p]) continue;
                  ASSERT_TRUE(is_leader(p) && is_leader(s.peer)) << what << ": " << p << " -> " << s.peer;
                }
          }
  EXPECT_THROW(hierarchical_schedule({OpKind::all_to_all, Strategy{}, 2, 0, 4, 4}, {0, 1}), std::invalid_argument);
}

// What auto runs across two nodes with several peers each for a small sum: hierarchical with a
// one-shot between the two leaders. Checked with the runtime's own mixed semantics (memory within
// a node, network between nodes), several element sizes (so inner ring/tree pipelines), counts 0
// and 1, and node layouts down to one peer or one node.
TEST(Schedule, HierarchicalWithOneShotBetweenLeadersUnderMixedSemantics) {
  const std::vector<std::vector<int>> layouts = {{0, 0, 1, 1}, {0, 1, 1, 1, 0}, {7, 3, 3}, {0}, {2, 2, 2}};
  for (const auto& node_of : layouts)
    for (const Strategy& inner : {Strategy{Algorithm::oneshot, 2}, Strategy{Algorithm::ring, 2}, Strategy{Algorithm::tree, 2}})
      for (std::size_t elem_size : {std::size_t{4}, std::size_t{1} << 20})
        for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{1001}}) {
          const int n = static_cast<int>(node_of.size());
          const ScheduleParams sp{OpKind::all_reduce, inner, n, 0, count, elem_size};
          std::string what = describe(sp) + " layout";
          for (int x : node_of) what += " " + std::to_string(x);
          const auto programs = hierarchical_schedule(sp, node_of);
          SimOptions mixed;
          mixed.node_of = node_of;
          const SimResult r = simulate(programs, initial_work(sp.op, n, count), mixed);
          ASSERT_TRUE(r.ok()) << what << ": " << r.error;
          ASSERT_EQ(check_result(sp, r), "") << what;
        }
}

// The causal reach of a schedule, computed without data, is what a full simulation finds; an
// all-reduce reaches everyone, a reduce does not reach the leaves from each other.
TEST(Schedule, CausalReachMatchesTheSimulation) {
  for (OpKind op : kOps)
    for (const Strategy& strategy : kScheduleStrategies)
      for (int n : {1, 2, 4, 7})
        for (std::size_t count : {std::size_t{1}, std::size_t{33}}) {
          const ScheduleParams sp{op, strategy, n, n - 1, count, 4};
          const auto programs = make_schedule(sp);
          const SimResult r = simulate(programs, initial_work(op, n, count), buffered_sends());
          ASSERT_TRUE(r.ok()) << describe(sp) << ": " << r.error;
          ASSERT_EQ(causal_reach(programs), r.heard_from) << describe(sp);
        }
  const auto all = causal_reach(make_schedule({OpKind::all_reduce, Strategy{Algorithm::centralized, 2}, 4, 0, 8, 4}));
  for (const auto& row : all) EXPECT_EQ(row, std::vector<bool>(4, true));
  const auto red = causal_reach(make_schedule({OpKind::reduce, Strategy{Algorithm::centralized, 2}, 4, 0, 8, 4}));
  EXPECT_EQ(red[0], std::vector<bool>(4, true));
  EXPECT_EQ(red[1], (std::vector<bool>{false, true, false, false}));
}

TEST(Schedule, IsDeterministic) {
  for (OpKind op : kOps)
    for (const Strategy& strategy : kScheduleStrategies)
      for (int n : {1, 5, 8, 13})
        for (std::size_t elem_size : kElemSizes) {
          const ScheduleParams sp{op, strategy, n, n / 2, 1001, elem_size};
          ASSERT_TRUE(same_schedule(make_schedule(sp), make_schedule(sp))) << describe(sp);
        }
}

// Barrier: no data, nothing in the (empty) work buffer, and every peer must have heard from every
// other before its program ends (checked in MatchesReference through heard_from, re-checked here
// for bigger groups).
TEST(Schedule, BarrierEveryoneHearsFromEveryone) {
  for (const Strategy& strategy : kScheduleStrategies)
    for (int n : {1, 2, 17, 32, 33, 64}) {
      const ScheduleParams sp{OpKind::barrier, strategy, n, 0, 0, 4};
      const auto programs = make_schedule(sp);
      for (const Program& prog : programs)
        for (const Round& round : prog)
          for (const Step& st : round.steps) ASSERT_EQ(st.count, 0u) << describe(sp);
      const SimResult r = simulate(programs, PeerBuffers(static_cast<std::size_t>(n)));
      ASSERT_TRUE(r.ok()) << describe(sp) << ": " << r.error;
      for (int p = 0; p < n; ++p)
        for (int q = 0; q < n; ++q) ASSERT_TRUE(r.heard_from[p][q]) << describe(sp) << " " << p << "<-" << q;
    }
}

// Larger groups than the main grid, a few counts: still correct and deadlock free.
TEST(Schedule, LargerGroups) {
  for (OpKind op : kOps)
    for (const Strategy& strategy : kScheduleStrategies)
      for (int n : {31, 64})
        for (std::size_t count : {std::size_t{3}, std::size_t{100}}) {
          const ScheduleParams sp{op, strategy, n, n / 3, count, 4096};
          const SimResult r = simulate(make_schedule(sp), initial_work(op, n, count));
          ASSERT_TRUE(r.ok()) << describe(sp) << ": " << r.error;
          ASSERT_EQ(check_result(sp, r), "") << describe(sp);
        }
}

} // namespace
} // namespace chorus
