#include "explain.hpp"

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <chorus/gpu.hpp>

#include "op_runner.hpp"
#include "cuda/nccl_rank_op.hpp"
#include "strategies/planner.hpp"

namespace chorus::bench {

namespace {

OpKind kind_of(BenchOp op) {
  switch (op) {
    case BenchOp::all_reduce: return OpKind::all_reduce;
    case BenchOp::reduce: return OpKind::reduce;
    case BenchOp::broadcast: return OpKind::broadcast;
    case BenchOp::all_gather: return OpKind::all_gather;
    case BenchOp::reduce_scatter: return OpKind::reduce_scatter;
    case BenchOp::all_to_all: return OpKind::all_to_all;
    case BenchOp::gather: return OpKind::gather;
    case BenchOp::scatter: return OpKind::scatter;
    case BenchOp::send_recv: return OpKind::send;
    case BenchOp::barrier: return OpKind::barrier;
  }
  return OpKind::barrier;
}

// Where the sweep's peers are, as the orchestrator would describe them: with --nodes, every node
// process on this host (the launcher starts them here), global rank r on node r / peers.
Topology topology_of(const Options& o, unsigned threads) {
  Topology t;
  t.peers = static_cast<int>(o.participants());
  if (!o.multi_node()) return t;
  t.shared_memory = false;
  std::vector<uint32_t> ranks = o.group;
  if (ranks.empty())
    for (uint32_t r = 0; r < o.nodes * o.peers; ++r) ranks.push_back(r);
  for (uint32_t r : ranks) t.rank_node.push_back(r / o.peers);
  const bool share = o.transport == HostTransport::automatic;
  const auto gpus = static_cast<uint32_t>(o.device == DeviceType::cuda ? std::max(0, gpu::device_count()) : 0);
  for (uint32_t k = 0; k < o.nodes; ++k) {
    t.node_host.push_back("host 0");
    t.node_threads.push_back(threads);
    t.node_domain.push_back(share ? 0 : 1 + k);
    t.node_gpus.push_back(gpus);
  }
  return t;
}

// Send/recv: the sweep's pairs (rank 2k sends to 2k + 1) as the planner sees each: a pair on one
// node process is paired by its local server, as threads of one process are; one across node
// processes goes through the network. The first pair of each kind, in rank order.
struct PairKind {
  uint32_t from, to;
  Topology topology;
};
std::vector<PairKind> pair_kinds(const Topology& all) {
  std::vector<PairKind> kinds;
  bool seen[2] = {false, false};
  for (uint32_t r = 0; r + 1 < all.rank_node.size(); r += 2) {
    const bool across = all.rank_node[r] != all.rank_node[r + 1];
    if (seen[across]) continue;
    seen[across] = true;
    Topology one_process;
    one_process.peers = 2;
    kinds.push_back({r, r + 1, across ? all : one_process});
  }
  return kinds;
}

} // namespace

int explain(const Options& o, const std::vector<std::size_t>& sizes) {
  Config cfg;
  cfg.num_devices = o.peers;
  cfg.with_local_strategy(o.strategy);
  if (o.multi_node()) cfg.with_global_strategy(o.strategy);
  cfg.host_transport = o.transport;
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  PlanQuery q;
  q.kind = kind_of(o.op);
  q.dtype = o.dtype;
  q.redop = o.redop;
  q.root = static_cast<int>(o.root);
  q.on_device = o.device == DeviceType::cuda;
  q.group = o.group.empty() ? 0 : 1;  // --group: a subgroup (any id but the world's 0)
  q.topology = topology_of(o, threads);
  // The arena: the threads of one process share one; node processes one host's, where they share
  // its memory (every node here, unless --transport network); sized by every peer of the job.
  const bool one_domain = o.multi_node() && o.nodes >= 2 && o.transport == HostTransport::automatic;
  if (!o.multi_node() || one_domain) q.arena_slot = arena_slot_bytes(o.multi_node() ? o.nodes * o.peers : o.peers);
  q.arena_across_nodes = one_domain;
  q.nccl_serves = q.on_device && gpu::nccl_serves(q.kind, q.dtype, q.redop);
  q.distinct_gpus = q.on_device && o.gpus >= o.peers;  // peer r on GPU r mod --gpus
  std::printf("# chorus-bench --explain: op %s, %u peer(s)%s, dtype %s: the planner's decision for each size "
              "(strategies/planner.hpp); nothing runs\n",
              std::string(to_string(o.op)).c_str(), o.participants(),
              o.multi_node() ? (" on " + std::to_string(o.nodes) + " node processes").c_str() : "",
              std::string(to_string(o.dtype)).c_str());
  std::printf("#%12s %12s  %s\n", "size", "count", "plan");
  std::vector<PairKind> pairs;
  if (o.op == BenchOp::send_recv && o.multi_node()) pairs = pair_kinds(q.topology);
  auto where = [](const PairKind& p) { return p.topology.shared_memory ? "on one node process" : "across nodes"; };
  if (pairs.size() > 1)
    std::printf("# ranks %u->%u are %s, ranks %u->%u %s: each size's line is the first pair's, the line after "
                "it (#) the other's\n",
                pairs[0].from, pairs[0].to, where(pairs[0]), pairs[1].from, pairs[1].to, where(pairs[1]));
  for (std::size_t size : sizes) {
    const Layout l = layout_for(o.op, o.dtype, o.participants(), size);
    q.count = l.block;
    if (pairs.empty()) {
      std::printf(" %12zu %12zu  %s\n", l.bytes, l.count, to_string(plan_op(cfg, q)).c_str());
      continue;
    }
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      PlanQuery pq = q;
      pq.topology = pairs[i].topology;
      std::printf("%s%12zu %12zu  %s\n", i == 0 ? " " : "#", l.bytes, l.count, to_string(plan_op(cfg, pq)).c_str());
    }
  }
  return 0;
}

} // namespace chorus::bench
