// Schedules of every (op, algorithm) run through the simulator and compared with references
// computed here independently; plus structural properties, determinism and the simulator's own
// error detection.
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <chorus/config.hpp>
#include "strategies/schedule.hpp"
#include "strategies/simulate.hpp"
#include "strategies/tuning.hpp"

namespace chorus {

// Readable parameters in gtest's messages (found by argument-dependent lookup, so in chorus).
void PrintTo(const Strategy& s, std::ostream* os) { *os << to_string(s); }
void PrintTo(OpKind op, std::ostream* os) { *os << to_string(op); }

namespace {

using Work = std::vector<std::vector<int64_t>>;

constexpr OpKind kOps[] = {OpKind::all_reduce,     OpKind::reduce,     OpKind::broadcast,
                           OpKind::all_gather,     OpKind::reduce_scatter, OpKind::gather,
                           OpKind::scatter,        OpKind::all_to_all, OpKind::barrier};

const std::vector<Strategy> kStrategies = {
    {Algorithm::centralized, 2}, {Algorithm::tree, 2}, {Algorithm::tree, 3}, {Algorithm::tree, 4},
    {Algorithm::tree, 7},        {Algorithm::ring, 2}, {Algorithm::dbtree, 2},
    {Algorithm::direct, 2}};

// 4 bytes per element gives one pipeline chunk for every count used here; 8 KiB elements give
// chunks of about 64 elements (512 KiB), so pipelines run with many chunks of uneven sizes.
// OneElementChunks below covers the other extreme.
constexpr std::size_t kElemSizes[] = {4, 8 * 1024};

bool rooted(OpKind op) {
  return op == OpKind::reduce || op == OpKind::broadcast || op == OpKind::gather ||
         op == OpKind::scatter;
}

std::vector<int> roots_for(OpKind op, int n) {
  if (!rooted(op)) return {0};
  std::set<int> r{0, n - 1, n / 2};
  return {r.begin(), r.end()};
}

std::vector<std::size_t> counts_for(int n) {
  const std::size_t un = static_cast<std::size_t>(n);
  std::set<std::size_t> c{0, 1, un - 1, un, un + 1, 7, 1000, 1001};
  return {c.begin(), c.end()};
}

SimOptions ordered_combine() {
  SimOptions o;
  o.ordered_combine = true;
  return o;
}
SimOptions buffered_sends() {
  SimOptions o;
  o.buffered_sends = true;
  return o;
}

// Distinct per peer and element, so a lost, misplaced or double-counted contribution changes sums.
int64_t value(int peer, std::size_t e) {
  return (peer + 1) * int64_t{1000003} + static_cast<int64_t>(e) * 7 + 1;
}

Work initial_work(OpKind op, int n, std::size_t count) {
  Work w(static_cast<std::size_t>(n), std::vector<int64_t>(work_elements(op, n, count)));
  for (int p = 0; p < n; ++p)
    for (std::size_t e = 0; e < w[p].size(); ++e) w[p][e] = value(p, e);
  return w;
}

// The all_reduce result regions [0, count) of peers p and 0 hold the same bits (the second half
// of the work buffer is scratch).
bool same_result(const SimResult& r, int p, std::size_t count) {
  const auto c = static_cast<std::ptrdiff_t>(count);
  return std::equal(r.work[p].begin(), r.work[p].begin() + c, r.work[0].begin(), r.work[0].begin() + c);
}

std::string describe(const ScheduleParams& sp) {
  return std::string(to_string(sp.op)) + " " + to_string(sp.strategy) +
         " n=" + std::to_string(sp.n) + " root=" + std::to_string(sp.root) +
         " count=" + std::to_string(sp.count) + " elem_size=" + std::to_string(sp.elem_size);
}

// Compares the regions the op defines with references computed from value(); "" when all match.
std::string check_result(const ScheduleParams& sp, const SimResult& r) {
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
                                            ::testing::ValuesIn(kStrategies)),
                         param_name);

// With a combine that depends on order and grouping, all_reduce must still leave every peer with
// the same bits: each chunk is reduced once, in one order, then distributed.
TEST(Schedule, AllReduceIsBitIdenticalAcrossPeers) {
  for (const Strategy& strategy : kStrategies)
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

// ---- the tuning module: every branch of tune() ----

Topology one_process(int n) {
  Topology t;
  t.peers = n;
  return t;
}

// A network level: rank r on node rank_node[r]; node k on hosts[k] with threads[k] hardware threads.
Topology network(std::vector<uint32_t> rank_node, std::vector<std::string> hosts, std::vector<unsigned> threads) {
  Topology t;
  t.peers = static_cast<int>(rank_node.size());
  t.shared_memory = false;
  t.rank_node = std::move(rank_node);
  t.node_host = std::move(hosts);
  t.node_threads = std::move(threads);
  return t;
}

// n nodes of one peer each, each on a machine of its own with plenty of threads.
Topology separate_machines(int n) {
  std::vector<uint32_t> rank_node;
  std::vector<std::string> hosts;
  for (int k = 0; k < n; ++k) {
    rank_node.push_back(static_cast<uint32_t>(k));
    hosts.push_back("10.0.0." + std::to_string(k));
  }
  return network(rank_node, hosts, std::vector<unsigned>(static_cast<std::size_t>(n), 64));
}

// n nodes of one peer each, all on one machine with `threads` hardware threads.
Topology one_machine(int n, unsigned threads) {
  std::vector<uint32_t> rank_node;
  for (int k = 0; k < n; ++k) rank_node.push_back(static_cast<uint32_t>(k));
  return network(rank_node, std::vector<std::string>(static_cast<std::size_t>(n), "127.0.0.1"),
                 std::vector<unsigned>(static_cast<std::size_t>(n), threads));
}

std::string tuned(const Config& c, OpKind op, DType dtype, std::size_t count, const Topology& t) {
  return to_string(tune(c, op, dtype, count, t));
}

TEST(Tuning, SharedMemorySmallIsCentralizedLargeIsDirect) {
  Config c;
  const std::size_t t = c.auto_threshold_bytes;
  EXPECT_EQ(tune(c, OpKind::all_reduce, DType::f32, t / 4 - 1, one_process(4)),
            RunStrategy::flat({Algorithm::centralized, 2}));
  EXPECT_EQ(tune(c, OpKind::all_reduce, DType::f32, t / 4, one_process(4)), RunStrategy::flat({Algorithm::direct, 2}));
  EXPECT_EQ(tuned(c, OpKind::broadcast, DType::f64, t / 8, one_process(2)), "direct");
  // All-gather and reduce-scatter are sized by the whole buffer (n blocks of count).
  EXPECT_EQ(tuned(c, OpKind::all_gather, DType::u8, t / 4, one_process(4)), "direct");
  EXPECT_EQ(tuned(c, OpKind::all_gather, DType::u8, t / 4 - 1, one_process(4)), "centralized");
  EXPECT_EQ(tuned(c, OpKind::reduce_scatter, DType::u8, t / 2, one_process(2)), "direct");
  // One peer, and the barrier, are latency bound whatever the size.
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, t, one_process(1)), "centralized");
  EXPECT_EQ(tuned(c, OpKind::barrier, DType::f32, t, one_process(4)), "centralized");
  // The threshold is the configuration's.
  c.auto_threshold_bytes = 64;
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 16, one_process(2)), "direct");
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 15, one_process(2)), "centralized");
}

TEST(Tuning, NetworkSmallIsATreeLargeIsTheRing) {
  Config c;
  const std::size_t t = c.auto_threshold_bytes;
  // Rooted ops stay flat even with several peers per node.
  const Topology two_by_two = network({0, 0, 1, 1}, {"a", "b"}, {8, 8});
  EXPECT_EQ(tuned(c, OpKind::broadcast, DType::f32, t / 4 - 1, two_by_two), "tree:2");
  EXPECT_EQ(tuned(c, OpKind::broadcast, DType::f32, t / 4, two_by_two), "ring");
  EXPECT_EQ(tuned(c, OpKind::reduce, DType::f32, 16, two_by_two), "tree:2");
  EXPECT_EQ(tuned(c, OpKind::reduce, DType::f32, t, two_by_two), "ring");
  EXPECT_EQ(tuned(c, OpKind::gather, DType::f32, 16, two_by_two), "tree:2");
  EXPECT_EQ(tuned(c, OpKind::all_to_all, DType::f32, t, two_by_two), "ring");
  EXPECT_EQ(tuned(c, OpKind::barrier, DType::f32, 0, two_by_two), "tree:2");
  c.auto_tree_arity = 3;
  EXPECT_EQ(tuned(c, OpKind::broadcast, DType::f32, 16, two_by_two), "tree:3");
  // Every peer on one node: nothing to gain from a hierarchy, and no peer is alone: flat.
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 16, network({0, 0, 0}, {"a"}, {8})), "tree:3");
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, t, network({0, 0, 0}, {"a"}, {8})), "ring");
  // Separate nodes, beyond one-shot's inflow or not an all-reduce: tree, ring.
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, t, separate_machines(2)), "ring");
  EXPECT_EQ(tuned(c, OpKind::all_gather, DType::f32, 16, separate_machines(3)), "tree:3");
}

// One-shot: all-reduce only, every peer on a node of its own, while the n - 1 buffers each peer
// takes in stay under the threshold.
TEST(Tuning, OneShotAcrossSeparateNodesForASmallInflow) {
  Config c;
  const std::size_t t = c.auto_threshold_bytes;
  EXPECT_EQ(tune(c, OpKind::all_reduce, DType::f32, 256, separate_machines(2)),
            RunStrategy::flat({Algorithm::oneshot, 2}));
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 256, separate_machines(8)), "oneshot");
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 256, separate_machines(kStarPeers + 3)), "oneshot");
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::u8, t / 4 - 1, separate_machines(5)), "oneshot");
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::u8, t / 4, separate_machines(5)), "tree:2");
  EXPECT_EQ(tuned(c, OpKind::broadcast, DType::f32, 256, separate_machines(2)), "tree:2");
  EXPECT_EQ(tuned(c, OpKind::reduce, DType::f32, 256, separate_machines(2)), "tree:2");
  // Never in one process.
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 256, one_process(2)), "centralized");
}

// Crowded: nodes of the op that share a machine outnumber its hardware threads. Then messages
// count: a star up to kStarPeers peers, a tree beyond; two nodes keep the one-shot (it sends no
// more messages than the star there).
TEST(Tuning, CrowdedSmallAllReduceIsAStarUpToKStarPeers) {
  Config c;
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 256, one_machine(2, 1)), "oneshot");
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 256, one_machine(3, 2)), "centralized");
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 256, one_machine(4, 2)), "centralized");
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 16, one_machine(kStarPeers, 2)), "centralized");
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 16, one_machine(kStarPeers + 1, 2)), "tree:2");
  // Large buffers are not affected.
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, c.auto_threshold_bytes, one_machine(4, 2)), "ring");
  // Enough threads for every node: not crowded.
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 256, one_machine(4, 4)), "oneshot");
}

TEST(Tuning, CrowdingIsJudgedPerMachineFromTheTopologyAlone) {
  EXPECT_FALSE(crowded(one_process(8)));
  EXPECT_FALSE(crowded(one_machine(2, 2)));
  EXPECT_TRUE(crowded(one_machine(3, 2)));
  // Two machines with two nodes each and two threads each: neither is crowded.
  EXPECT_FALSE(crowded(network({0, 1, 2, 3}, {"a", "a", "b", "b"}, {2, 2, 2, 2})));
  EXPECT_TRUE(crowded(network({0, 1, 2, 3, 4}, {"a", "a", "b", "b", "b"}, {2, 2, 2, 2, 2})));
  // A machine counts its fewest threads (the nodes registered what they saw).
  EXPECT_TRUE(crowded(network({0, 1}, {"a", "a"}, {4, 1})));
  // A node that reports no threads counts as one.
  EXPECT_TRUE(crowded(network({0, 1}, {"a", "a"}, {0, 0})));
  // Only the op's nodes count: four nodes share a 2-thread machine, the op spans two of them.
  Topology t = one_machine(4, 2);
  t.rank_node = {1, 3, 3};
  t.peers = 3;
  EXPECT_FALSE(crowded(t));
  t.rank_node = {0, 1, 3};
  EXPECT_TRUE(crowded(t));
  Config c;
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 16, t), "centralized");
}

// Several peers on some node: all-reduce, all-gather and reduce-scatter go through one leader per
// node, with the rules above picking the leaders' strategy; reduce and broadcast stay flat.
TEST(Tuning, HierarchicalWithSeveralPeersOnANode) {
  Config c;
  const std::size_t t = c.auto_threshold_bytes;
  const Topology two_by_two = network({0, 0, 1, 1}, {"a", "b"}, {8, 8});
  EXPECT_EQ(tune(c, OpKind::all_reduce, DType::f32, 16, two_by_two), RunStrategy::among_leaders({Algorithm::oneshot, 2}));
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 16, two_by_two), "hier+oneshot");
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, t, two_by_two), "hier+ring");
  // The leaders' all-gather and reduce-scatter are sized by the leaders' blocks.
  EXPECT_EQ(tuned(c, OpKind::all_gather, DType::f32, 16, two_by_two), "hier+tree:2");
  EXPECT_EQ(tuned(c, OpKind::all_gather, DType::u8, t / 2, two_by_two), "hier+ring");
  EXPECT_EQ(tuned(c, OpKind::reduce_scatter, DType::u8, t / 2 - 1, two_by_two), "hier+tree:2");
  EXPECT_EQ(tuned(c, OpKind::reduce_scatter, DType::f32, t, two_by_two), "hier+ring");
  for (OpKind flat : {OpKind::reduce, OpKind::broadcast, OpKind::gather, OpKind::scatter, OpKind::all_to_all,
                      OpKind::barrier})
    EXPECT_FALSE(tune(c, flat, DType::f32, 16, two_by_two).hierarchical) << to_string(flat);
  // Uneven and interleaved layouts: the leaders are one per node, whatever the order of ranks.
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 16, network({1, 0, 1}, {"a", "b"}, {8, 8})), "hier+oneshot");
  // Crowded leaders: 3 nodes on a 2-thread machine, 2 peers each: a star among them.
  const Topology crowded3 = network({0, 0, 1, 1, 2, 2}, {"h", "h", "h"}, {2, 2, 2});
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 16, crowded3), "hier+centralized");
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 16, network({0, 0, 1, 1, 2, 2}, {"a", "b", "c"}, {2, 2, 2})),
            "hier+oneshot");
}

TEST(Tuning, FixedStrategiesRunAsNamedAndNcclIsAutoForHostTensors) {
  Config c;
  const Topology two_by_two = network({0, 0, 1, 1}, {"a", "b"}, {8, 8});
  c.with_global_strategy(*parse_strategy("ring"));
  EXPECT_EQ(tune(c, OpKind::all_reduce, DType::f32, 16, two_by_two), RunStrategy::flat({Algorithm::ring, 2}));
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 16, separate_machines(2)), "ring");
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 16, one_machine(4, 1)), "ring");
  // The global choice is not the local one.
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 16, one_process(4)), "centralized");
  c.with_local_strategy(*parse_strategy("tree:3"));
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 1 << 20, one_process(4)), "tree:3");
  c.with_local_strategy(*parse_strategy("dbtree"));
  EXPECT_EQ(tuned(c, OpKind::barrier, DType::f32, 0, one_process(4)), "dbtree");
  // One-shot is auto's alone: no configuration names it.
  EXPECT_FALSE(parse_strategy("oneshot").has_value());
  // nccl resolves as auto does for host tensors, at both levels.
  Config n;
  n.with_local_strategy(*parse_strategy("nccl"));
  n.with_global_strategy(*parse_strategy("nccl"));
  EXPECT_EQ(tuned(n, OpKind::all_reduce, DType::f32, 16, one_process(4)), "centralized");
  EXPECT_EQ(tuned(n, OpKind::all_reduce, DType::f32, 1 << 20, one_process(4)), "direct");
  EXPECT_EQ(tuned(n, OpKind::all_reduce, DType::f32, 16, two_by_two), "hier+oneshot");
  EXPECT_EQ(tuned(n, OpKind::all_reduce, DType::f32, 16, separate_machines(3)), "oneshot");
  EXPECT_EQ(tuned(n, OpKind::broadcast, DType::f32, 1 << 20, two_by_two), "ring");
}

TEST(Tuning, Names) {
  EXPECT_EQ(to_string(RunStrategy{}), "");
  EXPECT_EQ(to_string(RunStrategy::flat({Algorithm::tree, 2})), "tree:2");
  EXPECT_EQ(to_string(RunStrategy::flat({Algorithm::oneshot, 2})), "oneshot");
  EXPECT_EQ(to_string(RunStrategy::among_leaders({Algorithm::centralized, 2})), "hier+centralized");
  EXPECT_EQ(to_string(RunStrategy::of(RunStrategy::Path::p2p)), "p2p");
  EXPECT_EQ(to_string(RunStrategy::of(RunStrategy::Path::nccl)), "nccl");
  EXPECT_EQ(to_string(RunStrategy::of(RunStrategy::Path::device)), "device");
}

// Hierarchical schedules: right (and, for all_reduce, bit-identical on every peer) for contiguous,
// uneven and interleaved node layouts, every root and every inner strategy, under memory semantics
// (the local phases run between threads of one process); only leaders talk across nodes.
TEST(Schedule, Hierarchical) {
  const std::vector<std::vector<int>> layouts = {
      {0, 0, 1, 1, 2, 2}, {0, 1, 1, 1, 2, 2}, {0, 1, 0, 1}, {5, 5, 5, 2}, {0, 0, 0, 0, 1}, {3, 1, 2}};
  for (OpKind op : {OpKind::all_reduce, OpKind::reduce, OpKind::broadcast, OpKind::all_gather, OpKind::reduce_scatter})
    for (const auto& node_of : layouts)
      for (const Strategy& inner : kStrategies)
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
    for (const Strategy& strategy : kStrategies)
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
    for (const Strategy& strategy : kStrategies)
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
  for (const Strategy& strategy : kStrategies)
    for (int n : {1, 2, 17, 32, 33, 64}) {
      const ScheduleParams sp{OpKind::barrier, strategy, n, 0, 0, 4};
      const auto programs = make_schedule(sp);
      for (const Program& prog : programs)
        for (const Round& round : prog)
          for (const Step& st : round.steps) ASSERT_EQ(st.count, 0u) << describe(sp);
      const SimResult r = simulate(programs, Work(static_cast<std::size_t>(n)));
      ASSERT_TRUE(r.ok()) << describe(sp) << ": " << r.error;
      for (int p = 0; p < n; ++p)
        for (int q = 0; q < n; ++q) ASSERT_TRUE(r.heard_from[p][q]) << describe(sp) << " " << p << "<-" << q;
    }
}

// Larger groups than the main grid, a few counts: still correct and deadlock free.
TEST(Schedule, LargerGroups) {
  for (OpKind op : kOps)
    for (const Strategy& strategy : kStrategies)
      for (int n : {31, 64})
        for (std::size_t count : {std::size_t{3}, std::size_t{100}}) {
          const ScheduleParams sp{op, strategy, n, n / 3, count, 4096};
          const SimResult r = simulate(make_schedule(sp), initial_work(op, n, count));
          ASSERT_TRUE(r.ok()) << describe(sp) << ": " << r.error;
          ASSERT_EQ(check_result(sp, r), "") << describe(sp);
        }
}

// Every message of a schedule, as (sender, receiver).
std::vector<std::pair<int, int>> edges(const std::vector<Program>& programs) {
  std::vector<std::pair<int, int>> out;
  for (int p = 0; p < static_cast<int>(programs.size()); ++p)
    for (const Round& round : programs[p])
      for (const Step& st : round.steps)
        if (st.kind == StepKind::send) out.push_back({p, st.peer});
  return out;
}

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

// ---- the simulator itself ----

Step send(int peer, std::size_t off, std::size_t count) {
  return {StepKind::send, peer, off, count};
}
Step recv(int peer, std::size_t off, std::size_t count) {
  return {StepKind::recv_copy, peer, off, count};
}
Step recv_reduce(int peer, std::size_t off, std::size_t count) {
  return {StepKind::recv_reduce, peer, off, count};
}

Work buffers(std::size_t peers, std::size_t size) {
  Work w(peers, std::vector<int64_t>(size));
  for (std::size_t p = 0; p < peers; ++p)
    for (std::size_t e = 0; e < size; ++e) w[p][e] = static_cast<int64_t>(10 * p + e);
  return w;
}

std::string sim_error(const std::vector<Program>& programs, std::size_t size = 4) {
  return simulate(programs, buffers(programs.size(), size)).error;
}

TEST(Simulator, RunsAValidExchange) {
  // Both peers send and receive in the same round: posting first makes this fine.
  const std::vector<Program> programs = {
      {Round{{send(1, 0, 2), recv_reduce(1, 2, 2)}}, Round{{{StepKind::copy, -1, 0, 2, 2}}}},
      {Round{{send(0, 0, 2), recv(0, 2, 2)}}},
  };
  const SimResult r = simulate(programs, buffers(2, 4));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.work[0], (std::vector<int64_t>{12, 14, 12, 14}));  // [2,4) += peer 1's [0,2), copied down
  EXPECT_EQ(r.work[1], (std::vector<int64_t>{10, 11, 0, 1}));
  EXPECT_EQ(r.messages, 2u);
  EXPECT_EQ(r.elements_sent, 4u);
  EXPECT_EQ(r.makespan, 1u);
  EXPECT_TRUE(r.heard_from[0][1] && r.heard_from[1][0]);
}

TEST(Simulator, SendSeesContentAtPostTime) {
  // Peer 0 sends [0,1) in round 0, then overwrites it in round 1; peer 1 receives only in its
  // second round, but must still see the old value.
  const std::vector<Program> programs = {
      {Round{{send(1, 0, 1)}}, Round{{{StepKind::copy, -1, 0, 1, 1}}}},
      {Round{}, Round{{recv(0, 1, 1)}}},
  };
  const SimResult r = simulate(programs, buffers(2, 2));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.work[0], (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(r.work[1], (std::vector<int64_t>{10, 0}));
}

TEST(Simulator, FifoPerOrderedPair) {
  const std::vector<Program> programs = {
      {Round{{send(1, 0, 1), send(1, 1, 1)}}},
      {Round{{recv(0, 2, 1), recv(0, 3, 1)}}},
  };
  const SimResult r = simulate(programs, buffers(2, 4));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.work[1], (std::vector<int64_t>{10, 11, 0, 1}));
}

TEST(Simulator, DetectsDeadlock) {
  // Each receives before it sends, in separate rounds.
  const std::vector<Program> programs = {
      {Round{{recv(1, 0, 1)}}, Round{{send(1, 0, 1)}}},
      {Round{{recv(0, 0, 1)}}, Round{{send(0, 0, 1)}}},
  };
  EXPECT_NE(sim_error(programs).find("deadlock"), std::string::npos) << sim_error(programs);
}

TEST(Simulator, DetectsRendezvousDeadlock) {
  // Both send in round 0 and receive in round 1: a send completes only once received, so neither
  // round 0 ends.
  const std::vector<Program> programs = {
      {Round{{send(1, 0, 1)}}, Round{{recv(1, 1, 1)}}},
      {Round{{send(0, 0, 1)}}, Round{{recv(0, 1, 1)}}},
  };
  EXPECT_NE(sim_error(programs).find("deadlock"), std::string::npos) << sim_error(programs);
}

TEST(Simulator, DetectsCountMismatch) {
  const std::vector<Program> programs = {{Round{{send(1, 0, 2)}}}, {Round{{recv(0, 0, 1)}}}};
  EXPECT_NE(sim_error(programs).find("count mismatch"), std::string::npos) << sim_error(programs);
}

TEST(Simulator, DetectsUnmatchedSendAndReceive) {
  const std::vector<Program> sends = {{Round{{send(1, 0, 1)}}}, {}};
  EXPECT_NE(sim_error(sends).find("unmatched send"), std::string::npos) << sim_error(sends);
  const std::vector<Program> recvs = {{}, {Round{{recv(0, 0, 1)}}}};
  EXPECT_NE(sim_error(recvs).find("unmatched receive"), std::string::npos) << sim_error(recvs);
}

TEST(Simulator, DetectsOutOfRangeRegions) {
  EXPECT_NE(sim_error({{Round{{send(1, 3, 2)}}}, {Round{{recv(0, 0, 2)}}}}).find("out of range"),
            std::string::npos);
  EXPECT_NE(sim_error({{Round{{{StepKind::copy, -1, 0, 2, 3}}}}}).find("out of range"),
            std::string::npos);
}

TEST(Simulator, DetectsBadPeers) {
  EXPECT_NE(sim_error({{Round{{send(2, 0, 1)}}}, {}}).find("out of range"), std::string::npos);
  EXPECT_NE(sim_error({{Round{{recv(-1, 0, 1)}}}, {}}).find("out of range"), std::string::npos);
  EXPECT_NE(sim_error({{Round{{send(0, 0, 1)}}}, {}}).find("itself"), std::string::npos);
  EXPECT_NE(sim_error({{Round{{{StepKind::copy, 1, 0, 1, 2}}}}, {}}).find("peer -1"),
            std::string::npos);
}

TEST(Simulator, DetectsWriteOverARegionSentInTheSameRound) {
  const std::vector<Program> programs = {
      {Round{{send(1, 0, 2), recv(1, 1, 2)}}},
      {Round{{send(0, 0, 2), recv(0, 2, 2)}}},
  };
  EXPECT_NE(sim_error(programs).find("same round"), std::string::npos) << sim_error(programs);
  const std::vector<Program> by_copy = {
      {Round{{send(1, 2, 2), {StepKind::copy, -1, 3, 1, 0}}}},
      {Round{{recv(0, 0, 2)}}},
  };
  EXPECT_NE(sim_error(by_copy).find("same round"), std::string::npos) << sim_error(by_copy);
}

TEST(Simulator, DetectsOverlappingCopy) {
  EXPECT_NE(sim_error({{Round{{{StepKind::copy, -1, 1, 2, 0}}}}}).find("overlap"),
            std::string::npos);
}

TEST(Simulator, OrderedCombineDependsOnOrder) {
  // Peer 2 combines 0's then 1's value; peer 3 the other way round: results differ.
  const std::vector<Program> programs = {
      {Round{{send(2, 0, 1), send(3, 0, 1)}}},
      {Round{{send(2, 0, 1), send(3, 0, 1)}}},
      {Round{{recv_reduce(0, 0, 1), recv_reduce(1, 0, 1)}}},
      {Round{{recv_reduce(1, 0, 1), recv_reduce(0, 0, 1)}}},
  };
  const Work init = {{5}, {7}, {0}, {0}};
  const SimResult sum = simulate(programs, init);
  ASSERT_TRUE(sum.ok()) << sum.error;
  EXPECT_EQ(sum.work[2], sum.work[3]);
  const SimResult ordered = simulate(programs, init, ordered_combine());
  ASSERT_TRUE(ordered.ok()) << ordered.error;
  EXPECT_NE(ordered.work[2], ordered.work[3]);
}

TEST(Simulator, RejectsMismatchedBufferCount) {
  EXPECT_FALSE(simulate({{}, {}}, Work(1)).ok());
}

} // namespace
} // namespace chorus
