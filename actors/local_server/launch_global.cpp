// The local server core: launching a multi-node op once this node's peers have all called: the
// schedule over every node, the announcement to the other nodes (GlobalClient::begin_op), the plan.
// All of it runs after the core's lock is released (see mu_ in server_core.hpp).
#include "actors/local_server/server_core.hpp"

#include <algorithm>
#include <cstdint>

#include "actors/global_client/global_client.hpp"
#include "actors/global_client/net_op.hpp"
#include "strategies/planner.hpp"

namespace chorus {

std::shared_ptr<const CompiledSchedule> LocalServerCore::global_schedule(const Launch& l,
                                                                        const std::vector<uint32_t>& rank_node,
                                                                        RunStrategy& strategy) {
  const OpShape& shape = l.shape;
  // Keyed by what the planner reads, so a hit needs no decision; the key includes the
  // registration generation, whose configuration the decision read.
  GlobalKey key{l.generation, static_cast<int>(shape.kind), static_cast<int>(shape.dtype), shape.root, shape.count,
                rank_node};
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (auto it = global_cache_.find(key); it != global_cache_.end()) {
      strategy = it->second.second;
      return it->second.first;
    }
  }
  // The topology as plain data, the same on every node (the orchestrator's), so that every node
  // of the op picks the same schedule.
  const auto& topo = l.global->topology();
  PlanQuery q(shape);
  Topology& t = q.topology;
  t.peers = l.n;
  t.shared_memory = false;
  t.rank_node = rank_node;
  const bool share = l.config->host_transport == HostTransport::automatic;
  for (uint32_t k = 0; k < topo.nodes.size(); ++k) {
    const auto& node = topo.nodes[k];
    t.node_host.push_back("host " + std::to_string(node.host));  // as the orchestrator grouped them
    t.node_threads.push_back(node.hardware_threads);
    t.node_domain.push_back(share ? node.host : topo.num_nodes + k);
  }
  strategy = plan_path(*l.config, q);
  auto cs = CompiledSchedule::compile(schedule_of(strategy, plan_schedule(shape, l.n, strategy), t));
  log_plan(*l.config, q, LogWhere{l.global->node_id(), -1, l.key.first, static_cast<int64_t>(l.key.second)},
           op_label(shape.kind, l.key.second));
  std::lock_guard<std::mutex> lk(mu_);
  if (global_cache_.size() >= 512) global_cache_.clear();  // bound memory; rebuilding is cheap
  global_cache_.emplace(std::move(key), std::make_pair(cs, strategy));
  return cs;
}

void LocalServerCore::launch_global(Launch& l) {
  GlobalClient& global = *l.global;
  const uint64_t seq = l.key.second;
  const int local = static_cast<int>(l.arrivals.size());
  const int n = l.n;
  const std::string label = op_label(l.kind, seq);
  auto fail_all = [&](const Status& s) {
    for (auto& a : l.arrivals) a->call.reply->complete(s);
  };
  if (auto lost = global.lost(); !lost) return fail_all(lost_op(l.kind, seq, lost));
  const OpShape& shape = l.shape;
  Status s = l.status;
  OpAnnouncement mine;
  mine.kind = l.kind;
  if (s) {
    mine.dtype = shape.dtype;
    mine.redop = shape.redop;
    mine.root = static_cast<uint32_t>(shape.root);
    mine.count = shape.count;
    mine.shape = shape.agreed_shape;
  }
  mine.status = s;
  // The other nodes are waited for as long as the local peer that gives the least time says.
  // The shortest op's own timeout (OpOptions::timeout) goes to every node: once every node
  // called, the op's transfers end by the shortest any node's peers gave
  // (NetOp::extend_if_all_called_locked). A Config's timeout stays its process's own.
  const auto shortest = shortest_timeout(l.arrivals);
  const auto given = shortest_timeout(l.arrivals, true);
  mine.timeout_ms = static_cast<uint32_t>(std::clamp<int64_t>(given.count(), 0, UINT32_MAX));
  const auto when = Clock::now() + (shortest.count() > 0 ? shortest : l.config->timeout);
  // What this node's own peers wait for among themselves in the plan has the Config's timeout
  // (the NetOp's bound fails the plan sooner where it runs out), and so has NCCL's run.
  const auto data_when = std::max(when, Clock::now() + l.config->timeout);
  std::vector<uint32_t> rank_node = global.rank_nodes(l.members);
  std::shared_ptr<const CompiledSchedule> cs;
  RunStrategy strategy;
  // GPU tensors reach here only where the planner sends them through NCCL (the peers stage
  // them otherwise): the announcements alone cross the data connections, then NCCL runs the op
  // (nccl_run.hpp).
  std::vector<gpu::NcclRankOp> nccl_parts;
  if (s && l.gpu) {
    std::vector<NcclLocalRank> mine_ranks;
    for (auto& a : l.arrivals) mine_ranks.push_back({static_cast<int>(a->req.rank), a->call.input, a->call.output});
    s = announce_nccl(global, l.key.first, rank_node, mine_ranks, mine, nccl_parts);
    mine.status = s;  // a failure goes to every node, which words it with the op and this node
    for (auto& p : nccl_parts) {
      static_cast<OpDesc&>(p) = shape;
      p.nranks = n;
    }
    strategy = RunStrategy::of(RunStrategy::Path::nccl);
  } else if (s) {
    try {
      cs = global_schedule(l, rank_node, strategy);
    } catch (const std::exception& e) {
      s = Status(Errc::internal, label + ": " + e.what());
      mine.status = s;
    }
  }
  // Every node must see every announcement. Ours rides along with our data frames (and is
  // forwarded with theirs, see actors/global_client/net_op.hpp), so it goes directly only to the nodes that no
  // chain of the schedule's messages leads to from us; when our peers failed, to every node.
  const uint32_t me = global.node_id();
  std::vector<bool> reached(global.topology().nodes.size(), false);
  if (s && cs && !cs->reach.empty())
    for (int b = 0; b < n; ++b)
      for (int a = 0; a < n && !reached[rank_node[b]]; ++a)
        if (rank_node[a] == me && cs->reach[b][a]) reached[rank_node[b]] = true;
  if (launch_hook_) launch_hook_("global");
  auto remote = global.begin_op(l.key.first, seq, mine, when, label, rank_node, static_cast<uint32_t>(local), reached);
  std::shared_ptr<OpPlan> plan;
  std::shared_ptr<NcclRun> nccl;
  try {
    if (!s || l.gpu) {
      // This node's peers will not run the op (its announcement says why). They still conclude it
      // like every other node, judging every node's announcement, so that every peer everywhere
      // reports the same error, also when several nodes fail the op at once.
      // An NCCL op's plan is empty too: it concludes the announcements; then NCCL runs it.
      OpDesc none;  // no data of this node's: only the conclusion
      none.kind = l.kind, none.group = l.key.first, none.seq = seq;
      plan = std::make_shared<OpPlan>(none, n,
                                      CompiledSchedule::compile(std::vector<Program>(static_cast<std::size_t>(n))),
                                      data_when, label, remote, static_cast<unsigned>(local));
      if (s && l.gpu)
        nccl = std::make_shared<NcclRun>(l.global, std::dynamic_pointer_cast<NetOp>(remote), l.key.first, rank_node,
                                         std::move(nccl_parts), data_when, label);
    } else {
      plan = std::make_shared<OpPlan>(shape, n, std::move(cs),
                                      data_when, label, remote, static_cast<unsigned>(local));
    }
  } catch (const std::exception& e) {
    remote->abort(Status(Errc::internal, label + ": " + e.what()));
    return fail_all(Status(Errc::internal, label + ": " + e.what()));
  }
  for (int p = 0; p < local; ++p) {
    Reply& r = *l.arrivals[p]->call.reply;
    r.plan = plan;
    r.nccl = nccl;
    r.strategy = strategy;
    r.rank = static_cast<int>(l.arrivals[p]->req.rank);
    r.complete(Status::ok());
  }
}

} // namespace chorus
