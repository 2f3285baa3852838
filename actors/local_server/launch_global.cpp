// The local server core: launching a multi-node op once this node's peers have all called: the
// schedule over every node, the announcement to the other nodes (GlobalClient::begin_op), the plan.
#include "actors/local_server/server_core.hpp"

#include "actors/global_client/global_client.hpp"

namespace chorus {

std::shared_ptr<const CompiledSchedule> LocalServerCore::global_schedule(const OpShape& shape, int n,
                                                                        const std::vector<uint32_t>& rank_node,
                                                                        RunStrategy& strategy) {
  // Keyed by what the tuning module reads, so a hit needs no decision; the key includes the
  // registration generation, whose configuration the decision read.
  auto key = std::make_tuple(epoch_, static_cast<int>(shape.kind), static_cast<int>(shape.dtype), shape.root,
                             shape.count, rank_node);
  if (auto it = global_cache_.find(key); it != global_cache_.end()) {
    strategy = it->second.second;
    return it->second.first;
  }
  // The topology as plain data, the same on every node (the orchestrator's), so that every node
  // of the op picks the same schedule.
  const auto& topo = global_->topology();
  Topology t;
  t.peers = n;
  t.shared_memory = false;
  t.rank_node = rank_node;
  for (const auto& node : topo.nodes) {
    std::string host;
    uint16_t port = 0;
    t.node_host.push_back(split_host_port(node.data_address, host, port) ? host : node.data_address);
    t.node_threads.push_back(node.hardware_threads);
  }
  strategy = tune(*config_, shape.kind, shape.dtype, shape.count, t);
  const ScheduleParams p{shape.kind, strategy.strategy, n, shape.root, shape.count, dtype_size(shape.dtype)};
  auto cs = strategy.hierarchical
                ? CompiledSchedule::compile(hierarchical_schedule(p, std::vector<int>(rank_node.begin(), rank_node.end())))
                : schedule_for(p);
  if (global_cache_.size() >= 512) global_cache_.clear();  // bound memory; rebuilding is cheap
  global_cache_.emplace(std::move(key), std::make_pair(cs, strategy));
  return cs;
}

void LocalServerCore::launch_global(const OpKey& key, PendingOp& op) {
  const uint64_t seq = key.second;
  const int local = static_cast<int>(op.arrivals.size());
  std::vector<uint32_t> members;  // empty: the world
  if (key.first != 0) {
    auto g = groups_.find(key.first);
    if (g == groups_.end()) {
      for (auto& a : op.arrivals)
        a->call.reply->complete({Errc::invalid_argument, "group " + std::to_string(key.first) + " was destroyed"});
      return;
    }
    members = g->second.members;
  }
  const int n = static_cast<int>(members.empty() ? global_->total_peers() : members.size());
  std::vector<const OpRequestData*> reqs;
  for (auto& a : op.arrivals) reqs.push_back(&a->req);
  const std::string label = op_label(op.kind, seq);
  auto fail_all = [&](const Status& s) {
    for (auto& a : op.arrivals) a->call.reply->complete(s);
  };
  if (auto l = global_->lost(); !l) return fail_all(Status(l.code(), label + ": " + l.message()));
  OpShape shape{};
  Status s = local_errors(op);
  if (s) s = check_agreement(reqs, n, shape);
  OpAnnouncement mine;
  mine.kind = op.kind;
  if (s) {
    mine.dtype = shape.dtype;
    mine.redop = shape.redop;
    mine.root = static_cast<uint32_t>(shape.root);
    mine.count = shape.count;
    mine.shape = shape.agreed_shape;
  }
  mine.status = s;
  const auto when = deadline();
  std::vector<uint32_t> rank_node = global_->rank_nodes(members);
  std::shared_ptr<const CompiledSchedule> cs;
  RunStrategy strategy;
  if (s) {
    try {
      cs = global_schedule(shape, n, rank_node, strategy);
    } catch (const std::exception& e) {
      s = Status(Errc::internal, label + ": " + e.what());
      mine.status = s;
    }
  }
  // Every node must see every announcement. Ours rides along with our data frames (and is
  // forwarded with theirs, see actors/global_client/net_op.hpp), so it goes directly only to the nodes that no
  // chain of the schedule's messages leads to from us; when our peers failed, to every node.
  const uint32_t me = global_->node_id();
  std::vector<bool> reached(global_->topology().nodes.size(), false);
  if (s && cs && !cs->reach.empty())
    for (int b = 0; b < n; ++b)
      for (int a = 0; a < n && !reached[rank_node[b]]; ++a)
        if (rank_node[a] == me && cs->reach[b][a]) reached[rank_node[b]] = true;
  auto remote = global_->begin_op(key.first, seq, mine, when, label, rank_node, static_cast<uint32_t>(local), reached);
  std::shared_ptr<OpPlan> plan;
  try {
    if (!s) {
      // This node's peers will not run the op (its announcement says why). They still conclude it
      // like every other node, judging every node's announcement, so that every peer everywhere
      // reports the same error, also when several nodes fail the op at once.
      plan = std::make_shared<OpPlan>(op.kind, DType::f32, ReduceOp::sum, n, 0, 0,
                                      CompiledSchedule::compile(std::vector<Program>(static_cast<std::size_t>(n))),
                                      when, label, remote, static_cast<unsigned>(local));
    } else {
      plan = std::make_shared<OpPlan>(shape.kind, shape.dtype, shape.redop, n, shape.root, shape.count, std::move(cs),
                                      when, label, remote, static_cast<unsigned>(local));
    }
  } catch (const std::exception& e) {
    remote->abort(Status(Errc::internal, label + ": " + e.what()));
    return fail_all(Status(Errc::internal, label + ": " + e.what()));
  }
  for (int p = 0; p < local; ++p) {
    Reply& r = *op.arrivals[p]->call.reply;
    r.plan = plan;
    r.strategy = strategy;
    r.rank = static_cast<int>(op.arrivals[p]->req.rank);
    r.complete(Status::ok());
  }
}

} // namespace chorus
