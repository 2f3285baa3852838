#include <chorus/peer.hpp>

#include "actors/global_client/global_client.hpp"
#include "actors/runtime_impl.hpp"
#include "cuda/staging.hpp"
#include "messages/peer_codec.hpp"
#include "strategies/reduce_kernels.hpp"

namespace chorus {

namespace {

Status no_peer() { return {Errc::not_registered, "this Peer handle was never registered"}; }

std::byte* bytes(const Tensor& t) { return static_cast<std::byte*>(t.data()); }

// Sends one op request and waits for the server's answer: an error, or a plan to run.
std::shared_ptr<Reply> request(PeerState& s, OpRequestData req, const Tensor& in, const Tensor& out,
                               Status& status, Status local_error = Status::ok()) {
  if (s.finished) {
    status = Status(Errc::finished, "peer " + std::to_string(s.id) + " has already finished");
    return nullptr;
  }
  if (s.destroyed) {
    status = Status(Errc::invalid_argument, "group " + std::to_string(s.group) + " was destroyed by this peer");
    return nullptr;
  }
  req.peer = s.id;
  req.epoch = s.epoch;
  req.group = s.group;
  if (req.kind != OpKind::send && req.kind != OpKind::recv) req.seq = s.seq++;
  req.input = TensorMeta::of(in);
  req.output = TensorMeta::of(out);
  Call call;
  call.op = std::move(req);
  call.input = in;
  call.output = out;
  call.local_error = std::move(local_error);
  auto reply = call.reply;
  status = s.rt->submit_op(call, s.config.timeout, s.config.num_devices);
  if (status) s.last_strategy = reply->strategy;
  return reply;
}

// Sends one group request (create or destroy) as this peer and waits for the server's answer.
std::shared_ptr<Reply> group_request(PeerState& s, GroupRequestData g, Status& status) {
  g.peer = s.id;
  g.epoch = s.epoch;
  Call call;
  call.message = encode_group(g);
  auto reply = call.reply;
  status = s.rt->submit_group(call, s.config.timeout, s.config.num_devices);
  return reply;
}

// Runs this peer's part of a planned op, then divides for avg where this peer holds a result.
Status execute(Reply& r, const std::byte* in, std::byte* out) {
  if (r.device) return r.device->join();  // GPU tensors: the device actors run it (avg included)
  OpPlan& plan = *r.plan;
  WorkBuffer work = WorkBuffer::bind(plan.kind(), r.rank, plan.size(), plan.root(), plan.count(),
                                     plan.dtype(), in, out);
  if (auto s = plan.run(r.rank, work); !s) return s;
  if (plan.redop() == ReduceOp::avg && out != nullptr && holds_reduction(plan.kind(), r.rank, plan.root()))
    divide_by(plan.dtype(), out, plan.count(), static_cast<std::size_t>(plan.size()));
  return Status::ok();
}

Status collective(PeerState* s, OpRequestData req, const Tensor& in, const Tensor& out);

// Takes this peer's place in its next op without data, so that every peer of the op gets `why`
// (and sequence numbers stay aligned) rather than waiting for this one until the timeout.
Status fail_op(PeerState& s, OpRequestData req, Status why) {
  Status st;
  auto reply = request(s, std::move(req), Tensor(), Tensor(), st, std::move(why));
  if (!st) return st;
  return execute(*reply, nullptr, nullptr);  // across nodes: concludes the op with the other nodes
}

// Across nodes GPU tensors go through host memory: the op runs on host copies (the output copy
// starts as the output's content, since peers the op does not write into keep theirs), and the
// result is copied back into the caller's GPU tensor. An output the op ignores here (reduce and
// gather off the root) is left alone.
Status staged_collective(PeerState* s, OpRequestData req, const Tensor& in, const Tensor& out) {
  const bool in_place = out.defined() && out.data() == in.data();
  Tensor hin, hout;
  Status staged = stage_to_host(in, hin);
  if (staged && !in_place) staged = stage_to_host(out, hout);
  if (!staged) return fail_op(*s, std::move(req), staged);
  if (auto e = collective(s, std::move(req), hin, in_place ? hin : hout); !e) return e;
  if (!out.defined()) return Status::ok();
  return in_place ? stage_back(hin, in) : stage_back(hout, out);
}

Status collective(PeerState* s, OpRequestData req, const Tensor& in, const Tensor& out) {
  if (!s) return no_peer();
  if (s->global && on_device(in, out))
    return staged_collective(s, std::move(req), in, out);
  Status st;
  auto reply = request(*s, std::move(req), in, out, st);
  if (!st) return st;
  return execute(*reply, bytes(in), bytes(out.defined() ? out : in));
}

OpRequestData make(OpKind k, ReduceOp op = ReduceOp::sum, PeerId root = 0) {
  OpRequestData r;
  r.kind = k;
  r.redop = op;
  r.root = root;
  return r;
}

Result<Tensor> by_data_across_nodes(PeerState& s, OpKind kind, std::optional<Tensor> data);

// Broadcast or scatter whose root is the one peer that passes data. Receivers learn the shape from
// the server's reply and allocate; the broadcast source keeps its own tensor as the result.
Result<Tensor> by_data(PeerState* s, OpKind kind, std::optional<Tensor> data) {
  if (!s) return no_peer();
  if (data && data->is_cuda()) {  // the data moves through host memory; receivers get host tensors
    Tensor host;
    if (auto e = stage_to_host(*data, host); !e) {
      // Take this peer's place in the op's first step: across nodes the descriptor all-gather.
      OpRequestData req = make(s->global ? OpKind::all_gather : kind);
      req.root_from_data = !s->global;
      return fail_op(*s, req, e);
    }
    auto r = by_data(s, kind, host);
    if (r && kind == OpKind::broadcast) return *data;  // the source keeps its own tensor
    return r;
  }
  if (s->global) return by_data_across_nodes(*s, kind, std::move(data));
  OpRequestData req = make(kind);
  req.root_from_data = true;
  Tensor in = data ? *data : Tensor();
  Status st;
  auto reply = request(*s, req, in, Tensor(), st);
  if (!st) return st;
  Tensor out = (data && kind == OpKind::broadcast) ? *data : Tensor::zeros(reply->out_dtype, reply->out_shape);
  if (auto e = execute(*reply, bytes(in), bytes(out)); !e) return e;
  return out;
}

// Across nodes the server cannot see which peer holds the data, so every peer first learns every
// peer's (has data, dtype, shape) with one all-gather, decides the root the same way, and then
// runs the rooted op. Every peer reaches the same verdict from the same table.
Result<Tensor> by_data_across_nodes(PeerState& s, OpKind kind, std::optional<Tensor> data) {
  constexpr std::size_t kMaxDims = 8, kWidth = 3 + kMaxDims;  // has, dtype, ndim, dims
  const uint32_t n = static_cast<uint32_t>(s.members.size());
  std::vector<int64_t> mine(kWidth, 0);
  if (data) {
    mine[0] = data->shape().size() > kMaxDims ? 2 : 1;
    mine[1] = static_cast<int64_t>(data->dtype());
    mine[2] = static_cast<int64_t>(std::min(data->shape().size(), kMaxDims));
    for (std::size_t d = 0; d < static_cast<std::size_t>(mine[2]); ++d) mine[3 + d] = data->shape()[d];
  }
  Tensor in = Tensor::from(mine);
  Tensor table = Tensor::zeros(DType::i64, {static_cast<int64_t>(n * kWidth)});
  if (auto st = collective(&s, make(OpKind::all_gather), in, table); !st) return st;
  const int64_t* t = table.data_as<int64_t>();
  std::vector<int> sources;
  for (uint32_t r = 0; r < n; ++r)
    if (t[r * kWidth] != 0) sources.push_back(static_cast<int>(r));
  const std::string what(to_string(kind));
  if (sources.empty())
    return Status(Errc::no_data, what + " by data: no peer supplied the data (all " + std::to_string(n) + " peers passed none)");
  if (sources.size() > 1) {
    std::string list;
    for (std::size_t i = 0; i < sources.size(); ++i) list += (i ? ", " : "") + std::to_string(sources[i]);
    return Status(Errc::multiple_data, what + " by data: peers " + list + " all supplied data; exactly one may");
  }
  const uint32_t root = static_cast<uint32_t>(sources[0]);
  const int64_t* row = t + root * kWidth;
  if (row[0] == 2)
    return Status(Errc::invalid_argument, what + " by data: peer " + std::to_string(root) + "'s data has more than " +
                                              std::to_string(kMaxDims) + " dimensions");
  const DType dtype = static_cast<DType>(row[1]);
  Shape shape(row + 3, row + 3 + row[2]);
  std::size_t numel = 1;
  for (auto d : shape) numel *= static_cast<std::size_t>(d);
  if (kind == OpKind::broadcast) {
    Tensor out = s.rank == root ? *data : Tensor::zeros(dtype, shape);
    Tensor none;
    if (auto st = collective(&s, make(OpKind::broadcast, ReduceOp::sum, root), s.rank == root ? out : none, out); !st)
      return st;
    return out;
  }
  if (numel % n != 0)
    return Status(Errc::invalid_argument, "scatter by data: peer " + std::to_string(root) + "'s data " +
                                              std::string(to_string(dtype)) + "[" + std::to_string(numel) +
                                              "] does not split into " + std::to_string(n) + " equal parts");
  Shape part = (!shape.empty() && shape[0] == static_cast<int64_t>(n)) ? Shape(shape.begin() + 1, shape.end())
                                                                         : Shape{static_cast<int64_t>(numel / n)};
  Tensor out = Tensor::zeros(dtype, part);
  Tensor in_root = s.rank == root ? *data : Tensor();
  if (auto st = collective(&s, make(OpKind::scatter, ReduceOp::sum, root), in_root, out); !st) return st;
  return out;
}

// This peer's handle state on group `gid` (members: global ids by rank), sharing its registration.
std::shared_ptr<PeerState> state_for_group(const PeerState& s, uint32_t gid, std::vector<PeerId> members) {
  auto ns = std::make_shared<PeerState>();
  ns->rt = s.rt;
  ns->id = s.id;
  ns->config = s.config;
  ns->epoch = s.epoch;
  ns->offset = s.offset;
  ns->global = s.global;
  ns->group = gid;
  ns->members = std::move(members);
  const PeerId me = s.offset + s.id;
  ns->rank = static_cast<uint32_t>(std::find(ns->members.begin(), ns->members.end(), me) - ns->members.begin());
  return ns;
}

// Group creation across nodes: every member sends its member list to the first member (the
// leader) over point-to-point on the world; the leader checks they agree and answers each with
// the new group's id, unique in the job (the leader's global id and its own counter), or with the
// first disagreement. Every member then adopts the group on its node.
constexpr uint64_t kGroupTag = 0xC0C0000000000001ull;  // reserved: user tags stay below 2^63

Result<uint32_t> agree_on_group_across_nodes(PeerState& s, const std::vector<PeerId>& members) {
  const uint32_t total = s.global->total_peers(), me = s.offset + s.id;
  auto bad = [&](const std::string& why) {
    return Status(Errc::invalid_argument, "peer " + std::to_string(me) + ": new group: " + why);
  };
  if (members.empty()) return bad("the member list is empty");
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (members[i] >= total) return bad("member " + std::to_string(members[i]) + " is not a peer");
    for (std::size_t j = 0; j < i; ++j)
      if (members[j] == members[i]) return bad("member " + std::to_string(members[i]) + " is listed twice");
  }
  if (std::find(members.begin(), members.end(), me) == members.end()) return bad("the caller is not in the member list");
  // World point-to-point by global id, whatever handle new_group was called on.
  std::vector<PeerId> everyone(total);
  for (uint32_t i = 0; i < total; ++i) everyone[i] = i;
  Peer world = PeerAccess::make(state_for_group(s, 0, std::move(everyone)));
  auto list_tensor = [](const std::vector<PeerId>& m) {
    std::vector<int64_t> v(m.begin(), m.end());
    return Tensor::from(v);
  };
  auto wrap = [&](const Status& st) { return Status(st.code(), "new group: " + st.message()); };
  const uint32_t leader = members[0];
  auto no_ids = [&] {
    return bad("peer " + std::to_string(leader) + " has used up the group ids it may hand out (list another member first)");
  };
  if (me != leader) {
    Tensor len = Tensor::from(std::vector<int64_t>{static_cast<int64_t>(members.size())});
    if (auto st = world.send(len, leader, kGroupTag); !st) return wrap(st);
    if (auto st = world.send(list_tensor(members), leader, kGroupTag); !st) return wrap(st);
    Tensor answer = Tensor::zeros(DType::i64, {2});
    if (auto st = world.recv(answer, leader, kGroupTag); !st) return wrap(st);
    const int64_t* a = answer.data_as<int64_t>();
    if (a[0] == 2) return no_ids();
    if (a[0] != 0)
      return bad("peer " + std::to_string(a[1]) + " asked for a different member list than peer " +
                 std::to_string(leader) + " (members must pass the same list)");
    return static_cast<uint32_t>(a[1]);
  }
  // The leader: hear every member (in list order), then answer each.
  int64_t verdict = 0, who = 0;
  Status failure;
  for (std::size_t i = 1; i < members.size(); ++i) {
    Tensor len = Tensor::zeros(DType::i64, {1});
    if (auto st = world.recv(len, members[i], kGroupTag); !st) {
      failure = wrap(st);
      break;
    }
    const int64_t n = len.data_as<int64_t>()[0];
    Tensor theirs = Tensor::zeros(DType::i64, {std::max<int64_t>(n, 0)});
    if (auto st = world.recv(theirs, members[i], kGroupTag); !st) {
      failure = wrap(st);
      break;
    }
    std::vector<PeerId> got(theirs.data_as<int64_t>(), theirs.data_as<int64_t>() + n);
    if (got != members && verdict == 0) {
      verdict = 1;
      who = members[i];
    }
  }
  const bool heard_all = failure.is_ok();
  const auto fresh = heard_all && verdict == 0 ? s.rt->next_group_id(me, total) : std::optional<uint32_t>(0);
  if (!fresh) verdict = 2;  // this leader's ids are used up
  const uint32_t gid = fresh.value_or(0);
  // On a failure the members still waiting for an answer time out on their own.
  if (heard_all)
    for (std::size_t i = 1; i < members.size(); ++i) {
      Tensor answer = Tensor::from(std::vector<int64_t>{verdict, verdict == 1 ? who : static_cast<int64_t>(gid)});
      if (auto st = world.send(answer, members[i], kGroupTag); !st) return wrap(st);
    }
  if (!heard_all) return failure;
  if (verdict == 2) return no_ids();
  if (verdict)
    return bad("peer " + std::to_string(who) + " asked for a different member list than peer " + std::to_string(leader) +
               " (members must pass the same list)");
  return gid;
}

} // namespace

PeerId Peer::id() const { return state_ ? state_->offset + state_->id : 0; }
uint32_t Peer::size() const { return state_ ? static_cast<uint32_t>(state_->members.size()) : 0; }
uint32_t Peer::rank() const { return state_ ? state_->rank : 0; }
uint32_t Peer::group() const { return state_ ? state_->group : 0; }
std::vector<PeerId> Peer::members() const { return state_ ? state_->members : std::vector<PeerId>{}; }
std::string Peer::last_strategy() const { return state_ ? to_string(state_->last_strategy) : std::string(); }

Result<Peer> Peer::new_group(std::vector<PeerId> members) {
  if (!state_) return no_peer();
  PeerState& s = *state_;
  if (s.finished) return Status(Errc::finished, "peer " + std::to_string(s.id) + " has already finished");
  uint32_t gid = 0;
  if (s.global) {
    auto agreed = agree_on_group_across_nodes(s, members);
    if (!agreed) return agreed.status();
    gid = *agreed;
    s.rt->core->adopt_group(gid, members);
  } else {
    GroupRequestData g;
    g.members = members;
    Status st;
    auto reply = group_request(s, std::move(g), st);
    if (!st) return st;
    gid = reply->group;
  }
  return Peer(state_for_group(s, gid, std::move(members)));
}

Result<Peer> Peer::split(int color, int key) {
  if (!state_) return no_peer();
  // Everyone learns everyone's (color, key); each color's members, ordered by (key, rank here),
  // then create their group together. A negative color joins no group (an empty handle).
  const uint32_t n = size();
  Tensor mine = Tensor::from(std::vector<int64_t>{color, key});
  Tensor all = Tensor::zeros(DType::i64, {static_cast<int64_t>(2 * n)});
  if (auto st = all_gather(mine, all); !st) return st;
  if (color < 0) return Peer();
  const int64_t* v = all.data_as<int64_t>();
  std::vector<std::pair<int64_t, uint32_t>> order;  // (key, rank)
  for (uint32_t r = 0; r < n; ++r)
    if (v[2 * r] == color) order.emplace_back(v[2 * r + 1], r);
  std::sort(order.begin(), order.end());
  std::vector<PeerId> members;
  for (auto& [k, r] : order) members.push_back(state_->members[r]);
  return new_group(std::move(members));
}

uint32_t Peer::node() const { return state_ && state_->global ? state_->global->node_id() : 0; }

Result<Peer> Peer::intra_node() {
  if (!state_) return no_peer();
  return split(static_cast<int>(node()), static_cast<int>(rank()));
}

Result<Peer> Peer::inter_node() {
  if (!state_) return no_peer();
  const PeerState& s = *state_;
  // Am I the lowest rank of my node within this group?
  bool leader = true;
  for (uint32_t r = 0; r < s.rank && leader; ++r) {
    const uint32_t node_r = s.global ? s.global->node_of(s.members[r]) : 0;
    if (node_r == node()) leader = false;
  }
  return split(leader ? 0 : -1, static_cast<int>(rank()));
}

Status Peer::destroy() {
  if (!state_) return no_peer();
  PeerState& s = *state_;
  if (s.group == 0) return {Errc::invalid_argument, "the world group cannot be destroyed; use finish()"};
  if (s.destroyed) return {Errc::invalid_argument, "group " + std::to_string(s.group) + " was already destroyed by this peer"};
  GroupRequestData g;
  g.destroy = true;
  g.group = s.group;
  Status st;
  group_request(s, std::move(g), st);
  if (st) s.destroyed = true;
  return st;
}

Status Peer::all_reduce(Tensor& inout, ReduceOp op) { return all_reduce(inout, inout, op); }
Status Peer::all_reduce(const Tensor& in, Tensor& out, ReduceOp op) {
  return collective(state_.get(), make(OpKind::all_reduce, op), in, out);
}

Status Peer::reduce(Tensor& inout, ReduceOp op, PeerId root) { return reduce(inout, inout, op, root); }
Status Peer::reduce(const Tensor& in, Tensor& out, ReduceOp op, PeerId root) {
  // Only the root receives; elsewhere the output is not touched (the work buffer is scratch).
  bool is_root = state_ && state_->rank == root;
  Tensor none;
  return collective(state_.get(), make(OpKind::reduce, op, root), in, is_root ? out : none);
}

Status Peer::broadcast(Tensor& buf, PeerId root) {
  bool is_root = state_ && state_->rank == root;
  Tensor none;
  return collective(state_.get(), make(OpKind::broadcast, ReduceOp::sum, root), is_root ? buf : none, buf);
}

Result<Tensor> Peer::broadcast(std::optional<Tensor> data) {
  return by_data(state_.get(), OpKind::broadcast, std::move(data));
}

Status Peer::all_gather(const Tensor& in, Tensor& out) {
  return collective(state_.get(), make(OpKind::all_gather), in, out);
}

Status Peer::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  return collective(state_.get(), make(OpKind::reduce_scatter, op), in, out);
}

Status Peer::all_to_all(const Tensor& in, Tensor& out) {
  return collective(state_.get(), make(OpKind::all_to_all), in, out);
}

Status Peer::gather(const Tensor& in, Tensor& out, PeerId root) {
  bool is_root = state_ && state_->rank == root;
  Tensor none;
  return collective(state_.get(), make(OpKind::gather, ReduceOp::sum, root), in, is_root ? out : none);
}

Status Peer::scatter(const Tensor& in, Tensor& out, PeerId root) {
  bool is_root = state_ && state_->rank == root;
  Tensor none;
  return collective(state_.get(), make(OpKind::scatter, ReduceOp::sum, root), is_root ? in : none, out);
}

Result<Tensor> Peer::scatter(std::optional<Tensor> data) {
  return by_data(state_.get(), OpKind::scatter, std::move(data));
}

Status Peer::barrier() {
  Tensor none;
  return collective(state_.get(), make(OpKind::barrier), none, none);
}

namespace {
// The node of a group-0 peer when it is on another node (multi-node mode), else nullopt.
std::optional<uint32_t> remote_node(const PeerState& s, PeerId other) {
  if (!s.global || other >= s.members.size()) return std::nullopt;
  uint32_t node = s.global->node_of(s.members[other]);
  if (node == s.global->node_id()) return std::nullopt;
  return node;
}
Clock::time_point deadline_of(const PeerState& s) { return Clock::now() + s.config.timeout; }
} // namespace

Status Peer::send(const Tensor& t, PeerId dst, uint64_t tag) {
  if (!state_) return no_peer();
  if (remote_node(*state_, dst)) {
    if (state_->finished) return {Errc::finished, "peer " + std::to_string(id()) + " has already finished"};
    Tensor host;
    Status staged = stage_to_host(t, host);
    state_->last_strategy = RunStrategy::of(RunStrategy::Path::p2p);
    return state_->global->send(id(), state_->members[dst], tag, staged ? host : t, deadline_of(*state_), staged);
  }
  OpRequestData req = make(OpKind::send);
  req.other = dst;
  req.tag = tag;
  Status st;
  auto reply = request(*state_, req, t, Tensor(), st);
  if (!st) return st;
  // The sender is rank 0 of a two-peer broadcast, in place: its buffer is only read.
  return execute(*reply, bytes(t), bytes(t));
}

Status Peer::recv(Tensor& t, PeerId src, uint64_t tag) {
  if (!state_) return no_peer();
  if (remote_node(*state_, src)) {
    if (state_->finished) return {Errc::finished, "peer " + std::to_string(id()) + " has already finished"};
    state_->last_strategy = RunStrategy::of(RunStrategy::Path::p2p);
    if (!t.is_cuda()) return state_->global->recv(state_->members[src], id(), tag, t, deadline_of(*state_));
    Tensor host = Tensor::zeros(t.dtype(), t.shape());
    if (auto e = state_->global->recv(state_->members[src], id(), tag, host, deadline_of(*state_)); !e) return e;
    return stage_back(host, t);
  }
  OpRequestData req = make(OpKind::recv);
  req.other = src;
  req.tag = tag;
  Status st;
  auto reply = request(*state_, req, Tensor(), t, st);
  if (!st) return st;
  return execute(*reply, nullptr, bytes(t));
}

Status Peer::finish() {
  if (!state_) return no_peer();
  if (state_->group != 0)
    return {Errc::invalid_argument, "finish() leaves the collective: call it on the world handle "
                                    "(a group is released with destroy())"};
  if (state_->finished)
    return {Errc::unregister_twice, "peer " + std::to_string(state_->id) + " finished twice"};
  Call call;
  call.message = encode_peer_only(state_->id, false, state_->epoch);
  Status s = state_->rt->submit(finish_atom::value, call, state_->config.timeout);
  if (s) state_->finished = true;
  return s;
}

} // namespace chorus
