// The planner's rules (strategies/plan_rules.hpp) as plain data: the tables' shape (every op finds
// a row, no row is shadowed by the rows above it, no row asks a fact both ways, every word has a
// number), and what chosen rows pick for given facts.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "strategies/plan_rules.hpp"

namespace chorus {
namespace {

constexpr unsigned kKinds = 11;
constexpr FactSet kEveryFactSet = (FactSet{1} << kFactCount) - 1;

// For each row of `table`, whether some op (a kind and a set of facts) finds it first.
template <class Pick>
std::vector<bool> reached(std::span<const Rule<Pick>> table) {
  std::vector<bool> hit(table.size(), false);
  for (unsigned k = 0; k < kKinds; ++k)
    for (FactSet f = 0; f <= kEveryFactSet; ++f)
      for (std::size_t i = 0; i < table.size(); ++i)
        if (table[i].matches(static_cast<OpKind>(k), f)) {
          hit[i] = true;
          break;
        }
  return hit;
}

template <class Pick>
void expect_well_formed(const char* name, std::span<const Rule<Pick>> table) {
  ASSERT_FALSE(table.empty()) << name;
  const auto& last = table.back();
  EXPECT_EQ(last.kinds, kAnyKind) << name << ": its last row must take every op";
  EXPECT_EQ(last.yes | last.no, 0u) << name << ": its last row must ask nothing";
  const auto hit = reached(table);
  for (std::size_t i = 0; i < table.size(); ++i) {
    EXPECT_TRUE(hit[i]) << name << ": row '" << table[i].name << "' is never reached (the rows above take all it takes)";
    EXPECT_EQ(table[i].yes & table[i].no, 0u) << name << ": row '" << table[i].name << "' asks a fact both ways";
    EXPECT_NE(table[i].kinds, 0) << name << ": row '" << table[i].name << "' takes no kind";
    PlanFacts f;
    EXPECT_EQ(words(table[i].why, f).find('{'), std::string::npos)
        << name << ": row '" << table[i].name << "' names a number the planner does not have: " << table[i].why;
  }
}

TEST(PlanRules, EveryTableTakesEveryOpAndReachesEveryRow) {
  expect_well_formed("meet", meet_rules());
  expect_well_formed("path", path_rules());
  expect_well_formed("spread", spread_rules());
  expect_well_formed("algorithm", algorithm_rules());
}

FactSet facts(std::initializer_list<Fact> fs) {
  FactSet s = 0;
  for (Fact f : fs) s |= bit(f);
  return s;
}

TEST(PlanRules, WhereAnOpMeetsFirst) {
  auto meet = [](OpKind k, FactSet f) { return first_rule(meet_rules(), k, f).pick; };
  using P = RunStrategy::Path;
  EXPECT_EQ(meet(OpKind::all_reduce, facts({Fact::arena})), P::arena);
  EXPECT_EQ(meet(OpKind::all_reduce, facts({Fact::arena, Fact::across, Fact::arena_across})), P::arena);
  EXPECT_EQ(meet(OpKind::broadcast, facts({Fact::arena, Fact::gpu})), P::device);
  EXPECT_EQ(meet(OpKind::broadcast, facts({Fact::arena, Fact::gpu, Fact::across, Fact::arena_across})), P::cuda_ipc);
  EXPECT_EQ(meet(OpKind::broadcast, facts({Fact::arena, Fact::gpu, Fact::across})), P::none) << "no arena spans the nodes";
  EXPECT_EQ(meet(OpKind::all_reduce, facts({})), P::none);
  EXPECT_EQ(meet(OpKind::send, facts({Fact::arena})), P::none) << "a pair never meets in the arena";
}

TEST(PlanRules, WhatRunsAnOp) {
  auto path = [](OpKind k, FactSet f) { return first_rule(path_rules(), k, f).pick; };
  using P = RunStrategy::Path;
  EXPECT_EQ(path(OpKind::all_reduce, 0).path, P::schedule);
  EXPECT_FALSE(path(OpKind::all_reduce, 0).staged);
  EXPECT_EQ(path(OpKind::recv, facts({Fact::gpu, Fact::across})).path, P::p2p);
  EXPECT_TRUE(path(OpKind::recv, facts({Fact::gpu, Fact::across})).staged);
  // One process: NCCL where every peer has a GPU of its own and NCCL serves the op.
  const FactSet distinct = facts({Fact::gpu, Fact::distinct_gpus, Fact::nccl_serves});
  EXPECT_EQ(path(OpKind::all_reduce, distinct).path, P::nccl);
  EXPECT_EQ(path(OpKind::all_reduce, distinct | Fact::configured).path, P::device);
  EXPECT_EQ(path(OpKind::all_reduce, facts({Fact::gpu, Fact::nccl_serves})).path, P::device);
  // Across nodes: NCCL where it is named, or where every node has a GPU and the runtime decides.
  const FactSet across = facts({Fact::gpu, Fact::across, Fact::nccl_serves});
  EXPECT_EQ(path(OpKind::all_gather, across | Fact::every_node_gpu).path, P::nccl);
  EXPECT_EQ(path(OpKind::all_gather, across | Fact::nccl_named).path, P::nccl);
  EXPECT_EQ(path(OpKind::all_gather, across).path, P::schedule) << "some node has no GPU";
  EXPECT_TRUE(path(OpKind::all_gather, across).staged);
  EXPECT_EQ(path(OpKind::all_gather, across | Fact::every_node_gpu | Fact::configured).path, P::schedule);
  EXPECT_EQ(path(OpKind::barrier, across | Fact::every_node_gpu | Fact::nccl_named).path, P::schedule)
      << "a barrier across nodes is a host op";
}

TEST(PlanRules, TheAlgorithmOfAHostSchedule) {
  auto algo = [](OpKind k, FactSet f) { return first_rule(algorithm_rules(), k, f); };
  EXPECT_EQ(algo(OpKind::all_reduce, facts({Fact::small})).pick.algorithm, Algorithm::centralized);
  EXPECT_EQ(algo(OpKind::all_reduce, facts({})).pick.algorithm, Algorithm::direct);
  EXPECT_TRUE(algo(OpKind::all_reduce, facts({Fact::configured, Fact::across})).pick.configured);
  const FactSet separate = facts({Fact::across, Fact::every_peer_a_node, Fact::small_inflow, Fact::small});
  EXPECT_EQ(algo(OpKind::all_reduce, separate).pick.algorithm, Algorithm::oneshot);
  EXPECT_EQ(algo(OpKind::all_reduce, separate | Fact::crowded | Fact::few_peers).pick.algorithm, Algorithm::centralized);
  const auto many = algo(OpKind::all_reduce, separate | Fact::crowded);
  EXPECT_EQ(many.pick.algorithm, Algorithm::tree) << "crowded, more than a star's peers";
  EXPECT_EQ(many.pick.arity, 0) << "the configured tree arity";
  EXPECT_EQ(algo(OpKind::broadcast, separate).pick.algorithm, Algorithm::tree) << "the one-shot is an all-reduce's";
  EXPECT_EQ(algo(OpKind::broadcast, facts({Fact::across})).pick.algorithm, Algorithm::ring);
  EXPECT_STREQ(algo(OpKind::barrier, facts({Fact::across})).why, "a barrier");
}

TEST(PlanRules, TheWordsNameTheOpsNumbers) {
  PlanFacts f;
  f.bytes = 1024, f.threshold = 262144, f.inflow = 3072, f.peers = 4, f.nodes = 2, f.hosts = 1;
  EXPECT_EQ(words("{bytes} B < the threshold ({threshold} B)", f), "1024 B < the threshold (262144 B)");
  EXPECT_EQ(words("{peers} peers on {nodes}: ", f), "4 peers on 2 nodes: ");
  f.nodes = 1;
  EXPECT_EQ(words("{nodes}, {node_count}, up to {star}", f), "1 node, 1, up to " + std::to_string(kStarPeers));
  EXPECT_EQ(words("{nothing}", f), "{nothing}");
}

TEST(PlanRules, DescribeListsEveryRow) {
  const std::string all = describe_rules();
  for (const auto& r : path_rules()) EXPECT_NE(all.find(std::string("  ") + r.name + " | "), std::string::npos) << r.name;
  for (const auto& r : algorithm_rules()) EXPECT_NE(all.find(std::string("  ") + r.name + " | "), std::string::npos) << r.name;
  EXPECT_NE(all.find("  star | all_reduce | across small_inflow every_peer_a_node crowded few_peers !one_peer | centralized"),
            std::string::npos)
      << all;
}

// docs/work.md shows the tables as chorus-bench --rules prints them: kept to the code.
TEST(PlanRules, TheDocsShowTheTablesAsTheyAre) {
  std::ifstream in(std::string(CHORUS_SOURCE_DIR) + "/docs/work.md");
  ASSERT_TRUE(in) << "docs/work.md";
  std::stringstream docs;
  docs << in.rdbuf();
  EXPECT_NE(docs.str().find("$ build/bin/chorus-bench --rules\n" + describe_rules() + "```"), std::string::npos)
      << "docs/work.md: paste the output of chorus-bench --rules under \"One planner\":\n" << describe_rules();
}

} // namespace
} // namespace chorus
