// The planner's host-schedule rules (plan_path, strategies/planner.hpp, read from the tables of
// plan_rules.hpp): every case, over plain topology data,
// the names of what it picks, and whether GPU tensors across nodes go through NCCL.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include <chorus/config.hpp>
#include "cuda/nccl_rank_op.hpp"
#include "strategies/planner.hpp"

namespace chorus {
namespace {

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

// What the planner runs an op of host tensors, `count` elements per peer, over `t` with.
RunStrategy host_plan(const Config& c, OpKind op, DType dtype, std::size_t count, const Topology& t) {
  PlanQuery q(OpDesc::of(op, dtype, ReduceOp::sum, 0, count));
  q.topology = t;
  const RunStrategy s = plan_path(c, q);
  EXPECT_EQ(s.path, RunStrategy::Path::schedule) << "a collective of host tensors runs a host schedule";
  return s;
}

// An op across nodes on GPU tensors, `choice` its kind's strategy across nodes: whether the
// planner runs it on one NCCL communicator over every rank of every node (else its tensors are
// staged through host memory).
bool nccl_across(const StrategyChoice& choice, OpKind kind, bool nccl_serves, const Topology& topology) {
  Config c;
  if (static_cast<std::size_t>(kind) < c.global.size()) c.global[static_cast<std::size_t>(kind)] = choice;
  PlanQuery q;
  q.kind = kind;
  q.on_device = true;
  q.nccl_serves = nccl_serves;
  q.topology = topology;
  q.topology.shared_memory = false;  // across nodes
  return plan_path(c, q).path == RunStrategy::Path::nccl;
}

std::string tuned(const Config& c, OpKind op, DType dtype, std::size_t count, const Topology& t) {
  return to_string(host_plan(c, op, dtype, count, t));
}

TEST(Tuning, SharedMemorySmallIsCentralizedLargeIsDirect) {
  Config c;
  const std::size_t t = c.auto_threshold_bytes;
  EXPECT_EQ(host_plan(c, OpKind::all_reduce, DType::f32, t / 4 - 1, one_process(4)),
            RunStrategy::flat({Algorithm::centralized, 2}));
  EXPECT_EQ(host_plan(c, OpKind::all_reduce, DType::f32, t / 4, one_process(4)), RunStrategy::flat({Algorithm::direct, 2}));
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
  EXPECT_EQ(host_plan(c, OpKind::all_reduce, DType::f32, 256, separate_machines(2)),
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
  EXPECT_EQ(host_plan(c, OpKind::all_reduce, DType::f32, 16, two_by_two), RunStrategy::among_leaders({Algorithm::oneshot, 2}));
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 16, two_by_two), "hier+oneshot");
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, t, two_by_two), "hier+ring");
  // The leaders' all-gather and reduce-scatter are sized by the leaders' blocks.
  EXPECT_EQ(tuned(c, OpKind::all_gather, DType::f32, 16, two_by_two), "hier+tree:2");
  EXPECT_EQ(tuned(c, OpKind::all_gather, DType::u8, t / 2, two_by_two), "hier+ring");
  EXPECT_EQ(tuned(c, OpKind::reduce_scatter, DType::u8, t / 2 - 1, two_by_two), "hier+tree:2");
  EXPECT_EQ(tuned(c, OpKind::reduce_scatter, DType::f32, t, two_by_two), "hier+ring");
  for (OpKind flat : {OpKind::reduce, OpKind::broadcast, OpKind::gather, OpKind::scatter, OpKind::all_to_all,
                      OpKind::barrier})
    EXPECT_FALSE(host_plan(c, flat, DType::f32, 16, two_by_two).hierarchical) << to_string(flat);
  // Uneven and interleaved layouts: the leaders are one per node, whatever the order of ranks.
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 16, network({1, 0, 1}, {"a", "b"}, {8, 8})), "hier+oneshot");
  // Crowded leaders: 3 nodes on a 2-thread machine, 2 peers each: a star among them.
  const Topology crowded3 = network({0, 0, 1, 1, 2, 2}, {"h", "h", "h"}, {2, 2, 2});
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 16, crowded3), "hier+centralized");
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 16, network({0, 0, 1, 1, 2, 2}, {"a", "b", "c"}, {2, 2, 2})),
            "hier+oneshot");
}

// Two hosts with two node processes each (2 peers per node): where the processes of a host share
// memory, one leader per host, so only the hosts' leaders cross the network; where they do not (the
// network forced: every node its own domain) or nothing says (no domains), one leader per node.
TEST(Tuning, HierarchicalByHostWhenProcessesOfAHostShareMemory) {
  Config c;
  Topology t = network({0, 0, 1, 1, 2, 2, 3, 3}, {"a", "a", "b", "b"}, {8, 8, 8, 8});
  t.node_domain = {0, 0, 1, 1};
  EXPECT_EQ(host_plan(c, OpKind::all_reduce, DType::f32, 16, t), RunStrategy::among_hosts({Algorithm::oneshot, 2}));
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 16, t), "hosts+oneshot");
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, c.auto_threshold_bytes, t), "hosts+ring");
  EXPECT_EQ(tuned(c, OpKind::all_gather, DType::f32, 16, t), "hosts+tree:2");
  EXPECT_FALSE(host_plan(c, OpKind::broadcast, DType::f32, 16, t).hierarchical);
  t.node_domain = {0, 1, 2, 3};
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 16, t), "hier+oneshot");
  t.node_domain.clear();
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 16, t), "hier+oneshot");
  // One host: its node leaders exchange through shared memory, as before.
  t.node_domain = {0, 0, 0, 0};
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 16, t), "hier+oneshot");
  // A host whose processes hold one peer each: still one leader per host.
  Topology singles = network({0, 1, 2, 3}, {"a", "a", "b", "b"}, {8, 8, 8, 8});
  singles.node_domain = {0, 0, 1, 1};
  EXPECT_EQ(tuned(c, OpKind::all_reduce, DType::f32, 16, singles), "hosts+oneshot");
}

TEST(Tuning, FixedStrategiesRunAsNamedAndNcclIsAutoForHostTensors) {
  Config c;
  const Topology two_by_two = network({0, 0, 1, 1}, {"a", "b"}, {8, 8});
  c.with_global_strategy(*parse_strategy("ring"));
  EXPECT_EQ(host_plan(c, OpKind::all_reduce, DType::f32, 16, two_by_two), RunStrategy::flat({Algorithm::ring, 2}));
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

// Ranks on nodes rank_node[r], node k having registered gpus[k] GPUs.
Topology gpu_nodes(std::vector<uint32_t> rank_node, std::vector<uint32_t> gpus) {
  Topology t = network(std::move(rank_node), {}, {});
  t.node_gpus = std::move(gpus);
  return t;
}

StrategyChoice named(const char* s) { return *parse_strategy(s); }

TEST(Tuning, TheNcclStrategyRunsGpuTensorsAcrossNodesThroughNcclWhereNcclServesTheOp) {
  const StrategyChoice nccl = named("nccl");
  const Topology every = gpu_nodes({0, 0, 1, 1, 2, 2}, {2, 2, 2});
  EXPECT_TRUE(nccl_across(nccl, OpKind::all_reduce, true, every));
  EXPECT_TRUE(nccl_across(nccl, OpKind::all_to_all, true, every));
  // Named, it does not ask the nodes' GPUs (a node without one is told by the announcements).
  EXPECT_TRUE(nccl_across(nccl, OpKind::all_reduce, true, gpu_nodes({0, 0, 1, 1, 2, 2}, {2, 0, 2})));
  // What NCCL does not serve goes through host memory.
  EXPECT_FALSE(nccl_across(nccl, OpKind::all_reduce, false, every));
  for (OpKind k : {OpKind::barrier, OpKind::send, OpKind::recv})
    EXPECT_FALSE(nccl_across(nccl, k, true, every)) << to_string(k);
}

TEST(Tuning, AutoRunsGpuTensorsAcrossNodesThroughNcclWhereEveryNodeOfTheOpHasAGpu) {
  const StrategyChoice a{};
  ASSERT_TRUE(a.is_auto);
  EXPECT_TRUE(nccl_across(a, OpKind::all_reduce, true, gpu_nodes({0, 0, 1, 1, 2, 2}, {2, 2, 2})));
  EXPECT_TRUE(nccl_across(a, OpKind::broadcast, true, gpu_nodes({0, 1}, {1, 8})));
  // One node of the op without a GPU: every node stages.
  EXPECT_FALSE(nccl_across(a, OpKind::all_reduce, true, gpu_nodes({0, 0, 1, 1, 2, 2}, {2, 0, 2})));
  EXPECT_FALSE(nccl_across(a, OpKind::all_reduce, true, gpu_nodes({0, 1}, {0, 0})));
  // Only the op's nodes count: a group on nodes 0 and 2 runs through NCCL beside a node 1 without.
  EXPECT_TRUE(nccl_across(a, OpKind::all_reduce, true, gpu_nodes({0, 2, 2}, {1, 0, 1})));
  EXPECT_FALSE(nccl_across(a, OpKind::all_reduce, true, gpu_nodes({0, 1, 2}, {1, 0, 1})));
  // A node the topology says nothing of, or no ranks: host memory.
  EXPECT_FALSE(nccl_across(a, OpKind::all_reduce, true, gpu_nodes({0, 3}, {1, 1, 1})));
  EXPECT_FALSE(nccl_across(a, OpKind::all_reduce, true, gpu_nodes({}, {1, 1})));
  // What NCCL does not serve, and the ops it never runs, stage under auto too.
  EXPECT_FALSE(nccl_across(a, OpKind::all_reduce, false, gpu_nodes({0, 1}, {1, 1})));
  for (OpKind k : {OpKind::barrier, OpKind::send, OpKind::recv})
    EXPECT_FALSE(nccl_across(a, k, true, gpu_nodes({0, 1}, {1, 1}))) << to_string(k);
}

TEST(Tuning, AHostStrategyStagesGpuTensorsAcrossNodes) {
  const Topology every = gpu_nodes({0, 0, 1, 1}, {2, 2});
  for (const char* s : {"ring", "tree:2", "centralized", "direct", "dbtree"})
    EXPECT_FALSE(nccl_across(named(s), OpKind::all_reduce, true, every)) << s;
}

// What the peer asks (cuda/'s gpu::nccl_serves, then the choice): bitwise reductions and float
// min/max (NCCL drops NaN) stage even where every node has a GPU; integer min/max and the ops
// without a reduction do not.
TEST(Tuning, AutoStagesWhatNcclCannotServe) {
  const StrategyChoice a{};
  const Topology every = gpu_nodes({0, 1, 2}, {1, 1, 1});
  auto through_nccl = [&](OpKind k, DType t, ReduceOp op) {
    return nccl_across(a, k, gpu::nccl_serves(k, t, op), every);
  };
  EXPECT_FALSE(through_nccl(OpKind::all_reduce, DType::i32, ReduceOp::bor));
  EXPECT_FALSE(through_nccl(OpKind::reduce_scatter, DType::u8, ReduceOp::bxor));
  EXPECT_FALSE(through_nccl(OpKind::all_reduce, DType::f32, ReduceOp::max));
  EXPECT_FALSE(through_nccl(OpKind::reduce, DType::bf16, ReduceOp::min));
  EXPECT_TRUE(through_nccl(OpKind::all_reduce, DType::i32, ReduceOp::max));
  EXPECT_TRUE(through_nccl(OpKind::all_reduce, DType::f16, ReduceOp::avg));
  EXPECT_TRUE(through_nccl(OpKind::all_gather, DType::i8, ReduceOp::bor));  // no reduction: the redop is moot
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

} // namespace
} // namespace chorus
