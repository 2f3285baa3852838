// The planner (strategies/planner.hpp) as plain data: one op and where its peers are, in; the plan
// and its reasons, out.
#include <gtest/gtest.h>

#include <chorus/config.hpp>

#include "strategies/planner.hpp"

namespace chorus {
namespace {

PlanQuery threads(int peers, OpKind kind, std::size_t count) {
  PlanQuery q;
  q.kind = kind;
  q.count = count;
  q.topology.peers = peers;
  q.arena_slot = 64 << 10;
  return q;
}

// `nodes` node processes of `per_node` peers each on one host of `cores` hardware threads.
PlanQuery nodes(uint32_t nodes, uint32_t per_node, OpKind kind, std::size_t count, unsigned cores = 64) {
  PlanQuery q;
  q.kind = kind;
  q.count = count;
  q.topology.peers = static_cast<int>(nodes * per_node);
  q.topology.shared_memory = false;
  for (uint32_t r = 0; r < nodes * per_node; ++r) q.topology.rank_node.push_back(r / per_node);
  for (uint32_t k = 0; k < nodes; ++k) {
    q.topology.node_host.push_back("h");
    q.topology.node_threads.push_back(cores);
    q.topology.node_domain.push_back(100 + k);  // each its own: the network between them
    q.topology.node_gpus.push_back(1);
  }
  return q;
}

std::string plan(const PlanQuery& q, const Config& c = Config{}) { return to_string(plan_op(c, q)); }

TEST(Planner, SmallOpsOfThreadsMeetInTheArenaAndLargeOnesRunDirect) {
  auto small = plan_op(Config{}, threads(4, OpKind::all_reduce, 256));
  EXPECT_EQ(small.first, RunStrategy::Path::arena);
  EXPECT_EQ(to_string(small.path), "centralized");
  EXPECT_EQ(small.rounds, 2u);
  EXPECT_EQ(small.messages, 6u);  // 3 peers hand in, the center hands 3 back
  EXPECT_EQ(plan(threads(4, OpKind::all_reduce, 256)),
            "arena, else centralized (2 rounds, 6 messages, the largest 1024 B): 1024 B fit the arena's slot of 65536 B; one process: "
            "1024 B < the threshold (262144 B)");
  auto large = plan_op(Config{}, threads(4, OpKind::all_reduce, 1 << 20));
  EXPECT_EQ(large.first, RunStrategy::Path::none);
  EXPECT_EQ(to_string(large.path), "direct");
  EXPECT_NE(large.why.find("4194304 B do not fit the arena's slot of 65536 B"), std::string::npos) << large.why;
}

// all_reduce_coalesced packs the arena's slot where the op meets there, else 1 MiB.
TEST(Planner, ACoalescedAllReducePacksWhatTheArenaTakes) {
  EXPECT_EQ(plan_pack_bytes(Config{}, threads(4, OpKind::all_reduce, 0)), std::size_t{64} << 10);
  auto q = nodes(2, 1, OpKind::all_reduce, 0);
  q.arena_slot = 32 << 10;
  EXPECT_EQ(plan_pack_bytes(Config{}, q), std::size_t{32} << 10) << "node processes of one host";
  q.group = 1;  // a subgroup
  EXPECT_EQ(plan_pack_bytes(Config{}, q), std::size_t{1} << 20) << "a subgroup: no arena";
  EXPECT_EQ(plan_pack_bytes(Config{}, nodes(2, 1, OpKind::all_reduce, 0)), std::size_t{1} << 20) << "none mapped";
  Config ring;
  ring.with_local_strategy(*parse_strategy("ring"));
  EXPECT_EQ(plan_pack_bytes(ring, threads(4, OpKind::all_reduce, 0)), std::size_t{1} << 20) << "a fixed strategy";
}

TEST(Planner, TheArenaServesOnlyTheWorldsAutoOpsWhereOneIsMapped) {
  auto q = threads(4, OpKind::all_reduce, 16);
  q.group = 1;  // a subgroup
  EXPECT_EQ(plan_op(Config{}, q).first, RunStrategy::Path::none);
  q = threads(4, OpKind::broadcast, 16);
  q.root_from_data = true;
  EXPECT_EQ(plan_op(Config{}, q).first, RunStrategy::Path::none);
  q = threads(4, OpKind::all_reduce, 16);
  q.arena_slot = 0;  // CHORUS_ARENA_KIB=0
  EXPECT_EQ(plan_op(Config{}, q).first, RunStrategy::Path::none);
  Config ring;
  ring.with_local_strategy(StrategyChoice{false, Strategy{Algorithm::ring, 2}});
  const auto fixed = plan_op(ring, threads(4, OpKind::all_reduce, 16));
  EXPECT_EQ(fixed.first, RunStrategy::Path::none) << "a strategy named in the config runs as named";
  EXPECT_EQ(to_string(fixed.path), "ring");
  EXPECT_NE(fixed.why.find("the configured strategy"), std::string::npos) << fixed.why;
}

TEST(Planner, ARootedOpFitsTheArenaByWhatItsRootPosts) {
  // A scatter's root posts every block: 4 x 4 KiB of f32 is 64 KiB, the slot; one element more is not.
  EXPECT_EQ(plan_op(Config{}, threads(4, OpKind::scatter, 4096)).first, RunStrategy::Path::arena);
  EXPECT_EQ(plan_op(Config{}, threads(4, OpKind::scatter, 4097)).first, RunStrategy::Path::none);
}

TEST(Planner, AcrossNodesTheRulesOfTheNetworkDecide) {
  // Every peer a node of its own, small: one exchange (one-shot); crowded cores: a star.
  EXPECT_EQ(to_string(plan_op(Config{}, nodes(4, 1, OpKind::all_reduce, 64)).path), "oneshot");
  EXPECT_EQ(to_string(plan_op(Config{}, nodes(4, 1, OpKind::all_reduce, 64, /*cores=*/2)).path), "centralized");
  // Several peers per node: one leader per node.
  const auto hier = plan_op(Config{}, nodes(2, 2, OpKind::all_reduce, 1 << 20));
  EXPECT_EQ(to_string(hier.path), "hier+ring");
  EXPECT_NE(hier.why.find("4 peers on 2 nodes: one leader per node"), std::string::npos) << hier.why;
  EXPECT_GT(hier.rounds, 0u);
  EXPECT_EQ(to_string(plan_op(Config{}, nodes(3, 1, OpKind::broadcast, 1 << 20)).path), "ring");
  EXPECT_EQ(to_string(plan_op(Config{}, nodes(3, 1, OpKind::broadcast, 16)).path), "tree:2");
}

TEST(Planner, GpuTensorsAcrossNodesGoThroughNcclOrAreStaged) {
  auto q = nodes(2, 1, OpKind::all_reduce, 1024);
  q.on_device = true;
  q.nccl_serves = true;
  const auto nccl = plan_op(Config{}, q);
  EXPECT_EQ(to_string(nccl.path), "nccl");
  EXPECT_FALSE(nccl.staged);
  q.topology.node_gpus[1] = 0;  // a node without a GPU: every node stages
  const auto staged = plan_op(Config{}, q);
  EXPECT_TRUE(staged.staged);
  EXPECT_EQ(staged.path.path, RunStrategy::Path::schedule);
  EXPECT_NE(staged.why.find("some node has no GPU"), std::string::npos) << staged.why;
  q.topology.node_gpus[1] = 1;
  q.nccl_serves = false;
  EXPECT_NE(plan_op(Config{}, q).why.find("NCCL cannot serve the op"), std::string::npos);
}

TEST(Planner, GpuTensorsOfOneProcessGoThroughNcclWhereEveryPeerHasItsOwnGpu) {
  auto q = threads(4, OpKind::all_reduce, 1024);
  q.on_device = true;
  q.nccl_serves = true;
  q.distinct_gpus = true;
  EXPECT_EQ(to_string(plan_op(Config{}, q).path), "nccl");
  q.distinct_gpus = false;  // logical peers sharing one GPU
  const auto shared = plan_op(Config{}, q);
  EXPECT_EQ(to_string(shared.path), "device");
  EXPECT_NE(shared.why.find("peers share a GPU"), std::string::npos) << shared.why;
  EXPECT_EQ(shared.first, RunStrategy::Path::device);  // they meet first, where a lead runs the op
}

// The op path's two questions (plan_route, plan_path) are the parts plan_op composes.
TEST(Planner, TheRouteAndThePathAreWhatThePlanSays) {
  for (std::size_t count : {std::size_t{16}, std::size_t{4096}, std::size_t{1} << 20}) {
    for (PlanQuery q : {threads(4, OpKind::all_reduce, count), nodes(2, 2, OpKind::all_reduce, count),
                        nodes(4, 1, OpKind::broadcast, count)}) {
      q.arena_slot = 64 << 10;
      q.arena_across_nodes = !q.topology.shared_memory;
      const PlanDecision d = plan_op(Config{}, q);
      const Route r = plan_route(Config{}, q);
      EXPECT_EQ(plan_path(Config{}, q), d.path) << count;
      // Every op of the world meets in the arena, also one too large for it: its peers see so.
      EXPECT_EQ(r.meet, RunStrategy::Path::arena) << count;
      EXPECT_EQ(d.first == RunStrategy::Path::arena, count <= 4096) << count;
      EXPECT_FALSE(r.staged);
    }
  }
  auto gpu = nodes(2, 1, OpKind::all_reduce, 1024);
  gpu.on_device = true;
  gpu.nccl_serves = false;
  EXPECT_TRUE(plan_route(Config{}, gpu).staged);
  EXPECT_EQ(plan_route(Config{}, gpu).meet, RunStrategy::Path::none) << "no arena across the nodes";
  gpu.arena_slot = 64 << 10;
  EXPECT_EQ(plan_route(Config{}, gpu).meet, RunStrategy::Path::none) << "an arena of one process's threads";
  gpu.arena_across_nodes = true;
  EXPECT_EQ(plan_route(Config{}, gpu).meet, RunStrategy::Path::cuda_ipc);
  gpu.nccl_serves = true;
  EXPECT_FALSE(plan_route(Config{}, gpu).staged);
  EXPECT_EQ(plan_path(Config{}, gpu).path, RunStrategy::Path::nccl);
}

TEST(Planner, GpuTensorsOfOneProcessTakeNcclOnlyWhereTheStrategyLetsTheRuntimeDecide) {
  EXPECT_TRUE(device_through_nccl(StrategyChoice{}, true));
  EXPECT_FALSE(device_through_nccl(StrategyChoice{}, false));
  EXPECT_TRUE(device_through_nccl(StrategyChoice{false, Strategy{Algorithm::nccl, 2}}, true));
  EXPECT_FALSE(device_through_nccl(StrategyChoice{false, Strategy{Algorithm::ring, 2}}, true));
}

TEST(Planner, SendAndRecvAreACopyBetweenThePair) {
  EXPECT_EQ(plan(threads(2, OpKind::send, 100)),
            "p2p: a copy between the pair; 400 B, copied by the second of the pair to arrive, as it pairs them");
  // In one process, above CHORUS_P2P_LOCAL_EAGER_KIB (256 KiB unless set) the receiver copies.
  EXPECT_TRUE(plan_pair_copy_at_pairing(256 << 10));
  EXPECT_FALSE(plan_pair_copy_at_pairing((256 << 10) + 1));
  EXPECT_EQ(plan(threads(2, OpKind::recv, (256 << 10) / 4 + 1)),
            "p2p: a copy between the pair; 262148 B, copied by the receiver's thread (above the eager limit in one "
            "process)");
  auto gpu = threads(2, OpKind::send, 100);
  gpu.on_device = true;  // as the local server reports a pair of GPU tensors too
  EXPECT_EQ(plan_op(Config{}, gpu).path.path, RunStrategy::Path::p2p);
  auto q = nodes(2, 1, OpKind::recv, 100);
  q.on_device = true;
  const auto d = plan_op(Config{}, q);
  EXPECT_EQ(d.path.path, RunStrategy::Path::p2p);
  EXPECT_TRUE(d.staged);
}

} // namespace
} // namespace chorus
