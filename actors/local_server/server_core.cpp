#include "actors/local_server/server_core.hpp"

#include <algorithm>

#include "actors/global_client/global_client.hpp"

namespace chorus {

namespace {
Status garbled(const std::string& err) { return {Errc::invalid_argument, err}; }

std::string names(const std::vector<int>& ps) {
  std::string s = ps.size() == 1 ? "peer " : "peers ";
  for (std::size_t i = 0; i < ps.size(); ++i) s += (i ? ", " : "") + std::to_string(ps[i]);
  return s;
}
} // namespace

LocalServerCore::LocalServerCore(TimerFn timer) : timer_(std::move(timer)) {}

LocalServerCore::~LocalServerCore() {
  std::lock_guard<std::mutex> lk(mu_);
  fail_everyone(Status(Errc::reset, "the local server stopped"));
}

void LocalServerCore::on_register(Call call) {
  std::lock_guard<std::mutex> lk(mu_);
  if (closed_) return call.reply->complete(*closed_);
  std::string err;
  auto r = decode_register(call.message, err);
  if (!r) return call.reply->complete(garbled(err));
  if (r->protocol_version != protocol_version())
    return call.reply->complete({Errc::invalid_argument, "peer " + std::to_string(r->peer) +
                                    " speaks protocol " + std::to_string(r->protocol_version) +
                                    ", this server speaks " + std::to_string(protocol_version())});
  if (auto s = r->config.validate(); !s) return call.reply->complete(s);
  if (config_) {
    if (auto d = config_->first_difference(r->config); !d.empty())
      return call.reply->complete({Errc::config_mismatch, "peer " + std::to_string(r->peer) +
                                      " registers with a config that differs from the first peer's: " + d});
  }
  const uint32_t n = r->config.num_devices;
  if (r->peer >= n)
    return call.reply->complete({Errc::invalid_argument, "peer id " + std::to_string(r->peer) +
                                    " is outside [0, " + std::to_string(n) + ")"});
  if (!config_) {
    config_ = r->config;
    registered_.assign(n, false);
    finished_.assign(n, false);
    std::vector<uint32_t> world(n);
    for (uint32_t i = 0; i < n; ++i) world[i] = i;
    groups_[0] = Group{world, std::vector<bool>(n, false)};
  }
  if (finished_[r->peer])
    return call.reply->complete({Errc::finished, "peer " + std::to_string(r->peer) +
                                    " has finished; it may register again once every peer has finished"});
  if (registered_[r->peer])
    return call.reply->complete({Errc::register_twice, "peer " + std::to_string(r->peer) + " is already registered"});
  registered_[r->peer] = true;
  call.reply->epoch = epoch_;
  call.reply->complete(Status::ok());
}

void LocalServerCore::start_timer(uint64_t key) {
  if (timer_) timer_(key, config_->timeout);
}

Status LocalServerCore::check_caller(uint32_t peer, uint64_t epoch) const {
  if (!config_ || peer >= registered_.size() || (!registered_[peer] && !finished_[peer]))
    return {Errc::not_registered, "peer " + std::to_string(peer) + " called before registering"};
  if (epoch != epoch_)
    return {Errc::not_registered, "peer " + std::to_string(peer) +
                                      "'s registration belongs to a collective that was reset; register again"};
  if (finished_[peer]) return {Errc::finished, "peer " + std::to_string(peer) + " has already finished"};
  return Status::ok();
}

void LocalServerCore::on_finish(Call call) {
  std::lock_guard<std::mutex> lk(mu_);
  if (closed_) return call.reply->complete(*closed_);
  std::string err;
  auto f = decode_finish(call.message, err);
  if (!f) return call.reply->complete(garbled(err));
  const uint32_t* peer = &f->peer;
  if (config_ && *peer < finished_.size() && finished_[*peer] && f->epoch == epoch_)
    return call.reply->complete({Errc::unregister_twice, "peer " + std::to_string(*peer) + " finished twice"});
  if (auto s = check_caller(*peer, f->epoch); !s) return call.reply->complete(s);
  finished_[*peer] = true;
  registered_[*peer] = false;
  // Once everyone has finished, the collective is over and a new one may register.
  if (std::all_of(finished_.begin(), finished_.end(), [](bool f) { return f; })) {
    fail_everyone(Status(Errc::finished, "every peer has finished"));
    clear();
  }
  call.reply->complete(Status::ok());
}

void LocalServerCore::on_reset(Call call) {
  std::lock_guard<std::mutex> lk(mu_);
  if (closed_) return call.reply->complete(*closed_);
  std::string err;
  auto peer = decode_peer_only(call.message, true, err);
  if (!peer) return call.reply->complete(garbled(err));
  fail_everyone(Status(Errc::reset, *peer == UINT32_MAX ? std::string("the collective was reset")
                                                        : "the collective was reset by peer " + std::to_string(*peer)));
  clear();
  call.reply->complete(Status::ok());
}

void LocalServerCore::close(Status why) {
  std::lock_guard<std::mutex> lk(mu_);
  fail_everyone(why);
  closed_ = std::move(why);
}

void LocalServerCore::fail_everyone(const Status& why) {
  for (auto& [seq, op] : ops_)
    for (auto& a : op.arrivals)
      if (a) a->call.reply->complete(why);
  for (auto* q : {&sends_, &recvs_})
    for (auto& [key, halves] : *q)
      for (auto& h : halves) h.arrival.call.reply->complete(why);
  for (auto& [members, pg] : pending_groups_)
    for (auto& [peer, c] : pg.arrivals) c.reply->complete(why);
  pending_groups_.clear();
  group_timers_.clear();
  ops_.clear();
  sends_.clear();
  recvs_.clear();
  op_timers_.clear();
  p2p_timers_.clear();
}

void LocalServerCore::clear() {
  ++epoch_;
  config_.reset();
  registered_.clear();
  finished_.clear();
  ops_.clear();
  groups_.clear();
  next_group_ = 1;
}

void LocalServerCore::on_op(Call call) {
  std::lock_guard<std::mutex> lk(mu_);
  if (closed_) return call.reply->complete(*closed_);
  std::optional<OpRequestData> req = std::move(call.op);
  if (auto s = check_caller(req->peer, req->epoch); !s) return call.reply->complete(s);
  if (global_) return global_op(std::move(*req), std::move(call));
  Status not_member;
  const Group* g = group_of(req->group, req->peer, not_member);
  if (!g) return call.reply->complete(not_member);
  req->rank = static_cast<uint32_t>(std::find(g->members.begin(), g->members.end(), req->peer) - g->members.begin());
  if (req->kind == OpKind::send || req->kind == OpKind::recv) {
    // The other side is named by its rank in the group; queues are keyed by global ids.
    const bool is_send = req->kind == OpKind::send;
    if (req->other >= g->members.size())
      return call.reply->complete({Errc::invalid_argument, "peer " + std::to_string(req->peer) + ": " +
                                      (is_send ? "send to" : "recv from") + " peer " + std::to_string(req->other) +
                                      " (not a peer)"});
    req->other = g->members[req->other];
    return point_to_point(std::move(*req), std::move(call));
  }
  const uint32_t index = req->rank;
  collective(std::move(*req), std::move(call), static_cast<int>(g->members.size()), index);
}

void LocalServerCore::global_op(OpRequestData req, Call call) {
  const uint32_t offset = global_->offset(), total = global_->total_peers(), here = config_->num_devices;
  const uint32_t me = offset + req.peer;  // global id
  const std::vector<uint32_t>* members = nullptr;  // by rank; null for the world (rank = global id)
  if (req.group != 0) {
    Status not_member;
    const Group* g = group_of(req.group, me, not_member);
    if (!g) return call.reply->complete(not_member);
    members = &g->members;
  }
  auto global_of = [&](uint32_t rank) { return members ? (*members)[rank] : rank; };
  const uint32_t size = members ? static_cast<uint32_t>(members->size()) : total;
  req.rank = members ? static_cast<uint32_t>(std::find(members->begin(), members->end(), me) - members->begin()) : me;
  if (req.kind == OpKind::send || req.kind == OpKind::recv) {
    // Pairs across nodes go through GlobalClient::send/recv; here both ends are on this node.
    const bool is_send = req.kind == OpKind::send;
    const uint32_t other = req.other < size ? global_of(req.other) : UINT32_MAX;
    if (other < offset || other >= offset + here)
      return call.reply->complete({Errc::invalid_argument, "peer " + std::to_string(req.rank) + ": " +
                                      (is_send ? "send to" : "recv from") + " peer " + std::to_string(req.other) +
                                      (req.other >= size ? " (not a peer)" : " (not on this node)")});
    req.other = other - offset;
    return point_to_point(std::move(req), std::move(call));
  }
  if (req.root_from_data)
    return call.reply->complete({Errc::internal, "by-data broadcast/scatter reached the server in multi-node mode"});
  // The arrivals to wait for: the group's members on this node, in rank order.
  uint32_t local = here, index = req.peer;
  if (members) {
    local = index = 0;
    for (uint32_t m : *members)
      if (m >= offset && m < offset + here) {
        if (m < me) ++index;
        ++local;
      }
  }
  collective(std::move(req), std::move(call), static_cast<int>(local), index);
}

void LocalServerCore::adopt_group(uint32_t gid, const std::vector<uint32_t>& members) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!config_ || groups_.count(gid)) return;
  groups_[gid] = Group{members, std::vector<bool>(members.size(), false)};
}

const LocalServerCore::Group* LocalServerCore::group_of(uint32_t gid, uint32_t peer, Status& error) const {
  auto it = groups_.find(gid);
  if (it == groups_.end()) {
    error = {Errc::invalid_argument, "group " + std::to_string(gid) + " does not exist (never created, or destroyed)"};
    return nullptr;
  }
  const auto& m = it->second.members;
  auto pos = std::find(m.begin(), m.end(), peer);
  if (pos == m.end()) {
    std::string list;
    for (std::size_t i = 0; i < m.size(); ++i) list += (i ? ", " : "") + std::to_string(m[i]);
    error = {Errc::invalid_argument, "peer " + std::to_string(peer) + " is not a member of group " +
                                         std::to_string(gid) + " [" + list + "]"};
    return nullptr;
  }
  if (it->second.released[pos - m.begin()]) {
    error = {Errc::invalid_argument, "peer " + std::to_string(peer) + " already destroyed group " + std::to_string(gid)};
    return nullptr;
  }
  return &it->second;
}

void LocalServerCore::on_group(Call call) {
  std::lock_guard<std::mutex> lk(mu_);
  if (closed_) return call.reply->complete(*closed_);
  std::string err;
  auto req = decode_group(call.message, err);
  if (!req) return call.reply->complete(garbled(err));
  if (auto s = check_caller(req->peer, req->epoch); !s) return call.reply->complete(s);
  if (req->destroy) {
    Status e;
    if (req->group == 0) return call.reply->complete({Errc::invalid_argument, "the world group cannot be destroyed"});
    const uint32_t who = global_ ? global_->offset() + req->peer : req->peer;  // members are global ids
    const Group* g = group_of(req->group, who, e);
    if (!g) return call.reply->complete(e);
    Group& gm = groups_[req->group];
    gm.released[std::find(gm.members.begin(), gm.members.end(), who) - gm.members.begin()] = true;
    // Across nodes only this node's members release their share here.
    if (global_) {
      bool all_local_released = true;
      for (std::size_t i = 0; i < gm.members.size(); ++i)
        if (gm.members[i] >= global_->offset() && gm.members[i] < global_->offset() + config_->num_devices && !gm.released[i])
          all_local_released = false;
      if (all_local_released) groups_.erase(req->group);
      return call.reply->complete(Status::ok());
    }
    if (std::all_of(gm.released.begin(), gm.released.end(), [](bool b) { return b; })) groups_.erase(req->group);
    return call.reply->complete(Status::ok());
  }
  if (global_)  // across nodes, members agree in Peer::new_group and each node adopts the group
    return call.reply->complete({Errc::internal, "group creation request reached the server in multi-node mode"});
  const auto& m = req->members;
  const uint32_t n = config_->num_devices;
  auto bad = [&](std::string why) {
    call.reply->complete({Errc::invalid_argument, "peer " + std::to_string(req->peer) + ": new group: " + why});
  };
  if (m.empty()) return bad("the member list is empty");
  for (std::size_t i = 0; i < m.size(); ++i) {
    if (m[i] >= n) return bad("member " + std::to_string(m[i]) + " is not a peer");
    for (std::size_t j = 0; j < i; ++j)
      if (m[j] == m[i]) return bad("member " + std::to_string(m[i]) + " is listed twice");
  }
  if (std::find(m.begin(), m.end(), req->peer) == m.end()) return bad("the caller is not in the member list");
  auto [it, fresh] = pending_groups_.try_emplace(m);
  PendingGroup& pg = it->second;
  if (fresh) {
    pg.timer = next_timer_++;
    group_timers_[pg.timer] = m;
    start_timer(pg.timer);
  }
  call.reply->timer = pg.timer;
  if (pg.arrivals.count(req->peer)) return bad("asked twice for the same group at once");
  pg.arrivals.emplace(req->peer, std::move(call));
  if (pg.arrivals.size() < m.size()) return;
  const uint32_t gid = next_group_++;
  groups_[gid] = Group{m, std::vector<bool>(m.size(), false)};
  for (auto& [peer, c] : pg.arrivals) {
    c.reply->group = gid;
    c.reply->complete(Status::ok());
  }
  group_timers_.erase(pg.timer);
  pending_groups_.erase(it);
}


void LocalServerCore::collective(OpRequestData req, Call call, int n, uint32_t index) {
  const OpKey key{req.group, req.seq};
  auto [it, fresh] = ops_.try_emplace(key);
  PendingOp& op = it->second;
  if (fresh) {
    op.arrivals.resize(n);
    op.kind = req.kind;
    op.timer = next_timer_++;
    op_timers_[op.timer] = key;
    start_timer(op.timer);
  }
  call.reply->timer = op.timer;
  if (op.failed) {  // a late peer of an op that already failed gets the same error
    call.reply->complete(op.failure);
    if (++op.answered == n) { op_timers_.erase(op.timer); ops_.erase(it); }
    return;
  }
  const uint32_t rank = index;
  if (op.arrivals[rank])
    return call.reply->complete({Errc::internal, op_label(req.kind, req.seq) + ": peer " +
                                    std::to_string(req.peer) + " called twice with one sequence number"});
  op.arrivals[rank] = Arrival{std::move(req), std::move(call)};
  if (++op.arrived == n) {
    launch(it->first, op);
    op_timers_.erase(op.timer);
    ops_.erase(it);
  }
}

Status LocalServerCore::local_errors(const PendingOp& op) const {
  for (const auto& a : op.arrivals)
    if (a && !a->call.local_error)
      return {a->call.local_error.code(), "peer " + std::to_string(global_ ? global_->offset() + a->req.peer : a->req.peer) +
                                              " could not take part: " + a->call.local_error.message()};
  return Status::ok();
}

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

std::shared_ptr<const CompiledSchedule> LocalServerCore::schedule_for(const ScheduleParams& p) {
  auto key = std::make_tuple(static_cast<int>(p.op), static_cast<int>(p.strategy.algorithm),
                             p.strategy.arity, p.n, p.root, p.count, p.elem_size);
  auto it = schedule_cache_.find(key);
  if (it != schedule_cache_.end()) return it->second;
  if (schedule_cache_.size() >= 512) schedule_cache_.clear();  // bound memory; rebuilding is cheap
  auto cs = CompiledSchedule::compile(make_schedule(p));
  schedule_cache_.emplace(key, cs);
  return cs;
}

void LocalServerCore::launch(const OpKey& key, PendingOp& op) {
  if (global_) return launch_global(key, op);
  const uint64_t seq = key.second;
  const int n = static_cast<int>(op.arrivals.size());
  std::vector<const OpRequestData*> reqs;
  for (auto& a : op.arrivals) reqs.push_back(&a->req);
  const std::string label = op_label(op.kind, seq);
  OpShape shape{};
  Status s = local_errors(op);
  if (s) s = check_agreement(reqs, n, shape);
  std::shared_ptr<OpPlan> plan;
  std::shared_ptr<DeviceRun> device;
  RunStrategy strategy;
  bool gpu = false;  // checked without copying tensors: host ops are the hot path
  for (auto& a : op.arrivals) gpu = gpu || on_device(a->call.input, a->call.output);
  if (s && gpu) {
    std::vector<PeerTensors> tensors;
    for (auto& a : op.arrivals) tensors.push_back({a->call.input, a->call.output, a->req.peer});
    s = make_device_run(tensors, shape, config_->local[static_cast<std::size_t>(shape.kind)], deadline(), label, device);
    if (s) strategy = device->strategy();
  } else if (s) {
    try {
      const std::size_t esize = dtype_size(shape.dtype);
      Topology t;
      t.peers = n;
      strategy = tune(*config_, shape.kind, shape.dtype, shape.count, t);
      auto cs = schedule_for({shape.kind, strategy.strategy, n, shape.root, shape.count, esize});
      plan = std::make_shared<OpPlan>(shape.kind, shape.dtype, shape.redop, n, shape.root, shape.count,
                                      std::move(cs), deadline(), label);
    } catch (const std::exception& e) {
      s = Status(Errc::internal, e.what());
    }
  }
  for (int p = 0; p < n; ++p) {
    Reply& r = *op.arrivals[p]->call.reply;
    if (!s) {
      r.complete(Status(s.code(), label + ": " + s.message()));
      continue;
    }
    r.plan = plan;
    r.device = device;
    r.strategy = strategy;
    r.rank = p;
    r.out_dtype = shape.out_dtype;
    r.out_shape = shape.out_shape;
    r.complete(Status::ok());
  }
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

void LocalServerCore::point_to_point(OpRequestData req, Call call) {
  const uint32_t n = config_->num_devices;
  const bool is_send = req.kind == OpKind::send;
  const std::string what = is_send ? "send" : "recv";
  if (req.other >= n || req.other == req.peer)
    return call.reply->complete({Errc::invalid_argument, "peer " + std::to_string(req.peer) + ": " + what +
                                    (is_send ? " to" : " from") + " peer " + std::to_string(req.other) +
                                    (req.other == req.peer ? " (itself)" : " (not a peer)")});
  const TensorMeta& mine = is_send ? req.input : req.output;
  if (!mine.present)
    return call.reply->complete({Errc::invalid_argument, "peer " + std::to_string(req.peer) + ": " + what + " without a buffer"});
  P2PKey key = is_send ? P2PKey{req.group, req.peer, req.other, req.tag} : P2PKey{req.group, req.other, req.peer, req.tag};
  auto& mine_q = is_send ? sends_ : recvs_;
  auto& other_q = is_send ? recvs_ : sends_;
  auto oit = other_q.find(key);
  if (oit == other_q.end() || oit->second.empty()) {  // wait for the other half
    uint64_t t = next_timer_++;
    p2p_timers_[t] = key;
    call.reply->timer = t;
    mine_q[key].push_back({Arrival{std::move(req), std::move(call)}, t});
    start_timer(t);
    return;
  }
  P2PHalf other = std::move(oit->second.front());
  oit->second.pop_front();
  if (oit->second.empty()) other_q.erase(oit);
  p2p_timers_.erase(other.timer);
  Arrival mine_a{std::move(req), std::move(call)};
  Arrival& snd = is_send ? mine_a : other.arrival;
  Arrival& rcv = is_send ? other.arrival : mine_a;
  const auto& [gid, src, dst, tag] = key;
  const std::string label = "send/recv " + std::to_string(src) + "->" + std::to_string(dst) + " tag " + std::to_string(tag);
  Status s;
  if (snd.req.input.dtype != rcv.req.output.dtype)
    s = {Errc::dtype_mismatch, label + ": sender has " + snd.req.input.describe() + ", receiver " + rcv.req.output.describe()};
  else if (snd.req.input.numel() != rcv.req.output.numel())
    s = {Errc::shape_mismatch, label + ": sender has " + snd.req.input.describe() + ", receiver " + rcv.req.output.describe()};
  if (!s) {
    snd.call.reply->complete(s);
    rcv.call.reply->complete(s);
    return;
  }
  const std::size_t count = snd.req.input.numel();
  if (on_device(snd.call.input, rcv.call.output)) {
    std::vector<PeerTensors> tensors{{snd.call.input, snd.call.input, src}, {Tensor(), rcv.call.output, dst}};
    OpShape shape{OpKind::send, snd.req.input.dtype, ReduceOp::sum, 0, count, snd.req.input.dtype, {}, {}};
    std::shared_ptr<DeviceRun> device;
    s = make_device_run(tensors, shape, config_->local[static_cast<std::size_t>(OpKind::broadcast)], deadline(),
                        label, device);
    if (!s) s = Status(s.code(), label + ": " + s.message());
    for (Arrival* a : {&snd, &rcv}) {
      a->call.reply->device = device;
      a->call.reply->strategy = RunStrategy::of(RunStrategy::Path::p2p);
      a->call.reply->rank = a == &snd ? 0 : 1;
      a->call.reply->complete(s);
    }
    return;
  }
  // Two-peer plan: rank 0 sends its buffer, rank 1 copies it straight into its own.
  std::vector<Program> progs(2);
  progs[0].push_back(Round{{Step{StepKind::send, 1, 0, count}}});
  progs[1].push_back(Round{{Step{StepKind::recv_copy, 0, 0, count}}});
  auto plan = std::make_shared<OpPlan>(OpKind::broadcast, snd.req.input.dtype, ReduceOp::sum, 2, 0, count,
                                       CompiledSchedule::compile(std::move(progs)), deadline(), label);
  for (Arrival* a : {&snd, &rcv}) a->call.reply->strategy = RunStrategy::of(RunStrategy::Path::p2p);
  snd.call.reply->plan = plan;
  snd.call.reply->rank = 0;
  rcv.call.reply->plan = plan;
  rcv.call.reply->rank = 1;
  snd.call.reply->complete(Status::ok());
  rcv.call.reply->complete(Status::ok());
}

void LocalServerCore::on_timeout(uint64_t key) {
  std::lock_guard<std::mutex> lk(mu_);
  if (auto t = group_timers_.find(key); t != group_timers_.end()) {
    auto pit = pending_groups_.find(t->second);
    group_timers_.erase(t);
    if (pit == pending_groups_.end()) return;
    std::vector<int> missing;
    for (uint32_t m : pit->first)
      if (!pit->second.arrivals.count(m)) missing.push_back(static_cast<int>(m));
    Status why(Errc::timeout, "new group: " + names(missing) + " never asked for it within " +
                                  std::to_string(config_ ? config_->timeout.count() : 0) + " ms");
    for (auto& [peer, c] : pit->second.arrivals) c.reply->complete(why);
    pending_groups_.erase(pit);
    return;
  }
  if (auto t = op_timers_.find(key); t != op_timers_.end()) {
    const OpKey ok = t->second;
    const uint64_t seq = ok.second;
    op_timers_.erase(t);
    auto it = ops_.find(ok);
    if (it == ops_.end() || it->second.failed) return;
    PendingOp& op = it->second;
    std::vector<int> missing;
    for (std::size_t p = 0; p < op.arrivals.size(); ++p)
      if (!op.arrivals[p]) missing.push_back(static_cast<int>(p + (global_ && ok.first == 0 ? global_->offset() : 0)));
    op.failed = true;
    op.failure = Status(Errc::timeout, op_label(op.kind, seq) + ": " + names(missing) + " never called within " +
                                           std::to_string(config_->timeout.count()) + " ms");
    for (auto& a : op.arrivals)
      if (a) a->call.reply->complete(op.failure);
    op.answered = op.arrived;
    op.arrivals.assign(op.arrivals.size(), std::nullopt);
    return;
  }
  auto t = p2p_timers_.find(key);
  if (t == p2p_timers_.end() || !config_) return;
  P2PKey pk = t->second;
  p2p_timers_.erase(t);
  for (auto* q : {&sends_, &recvs_}) {
    auto it = q->find(pk);
    if (it == q->end()) continue;
    auto& halves = it->second;
    for (auto h = halves.begin(); h != halves.end(); ++h) {
      if (h->timer != key) continue;
      const auto& [gid, src, dst, tag] = pk;
      bool is_send = q == &sends_;
      h->arrival.call.reply->complete(Status(
          Errc::timeout, std::string(is_send ? "send" : "recv") + " " + std::to_string(src) + "->" +
                             std::to_string(dst) + " tag " + std::to_string(tag) + ": peer " +
                             std::to_string(is_send ? dst : src) + " never posted the matching " +
                             (is_send ? "recv" : "send") + " within " + std::to_string(config_->timeout.count()) + " ms"));
      halves.erase(h);
      if (halves.empty()) q->erase(it);
      return;
    }
  }
}

} // namespace chorus
