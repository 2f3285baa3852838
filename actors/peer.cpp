#include "actors/peer.hpp"

#include "actors/runtime_impl.hpp"
#include "actors/wire_codec.hpp"
#include "strategies/reduce_kernels.hpp"

namespace chorus {

namespace {

Status no_peer() { return {Errc::not_registered, "this Peer handle was never registered"}; }

std::byte* bytes(const Tensor& t) { return static_cast<std::byte*>(t.data()); }

// Sends one op request and waits for the server's answer: an error, or a plan to run.
std::shared_ptr<Reply> request(PeerState& s, OpRequestData req, const Tensor& in, const Tensor& out,
                               Status& status) {
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
  call.message = encode_op(req);
  call.input = in;
  call.output = out;
  auto reply = call.reply;
  status = s.rt->submit_op(call, s.config.timeout, s.config.num_devices);
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
  OpPlan& plan = *r.plan;
  WorkBuffer work = WorkBuffer::bind(plan.kind(), r.rank, plan.size(), plan.root(), plan.count(),
                                     plan.dtype(), in, out);
  if (auto s = plan.run(r.rank, work); !s) return s;
  if (plan.redop() == ReduceOp::avg && out != nullptr) {
    bool holds = plan.kind() == OpKind::all_reduce || plan.kind() == OpKind::reduce_scatter ||
                 (plan.kind() == OpKind::reduce && r.rank == plan.root());
    if (holds) divide_by(plan.dtype(), out, plan.count(), static_cast<std::size_t>(plan.size()));
  }
  return Status::ok();
}

Status collective(PeerState* s, OpRequestData req, const Tensor& in, const Tensor& out) {
  if (!s) return no_peer();
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

// Broadcast or scatter whose root is the one peer that passes data. Receivers learn the shape from
// the server's reply and allocate; the broadcast source keeps its own tensor as the result.
Result<Tensor> by_data(PeerState* s, OpKind kind, std::optional<Tensor> data) {
  if (!s) return no_peer();
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

} // namespace

PeerId Peer::id() const { return state_ ? state_->id : 0; }
uint32_t Peer::size() const { return state_ ? static_cast<uint32_t>(state_->members.size()) : 0; }
uint32_t Peer::rank() const { return state_ ? state_->rank : 0; }
uint32_t Peer::group() const { return state_ ? state_->group : 0; }
std::vector<PeerId> Peer::members() const { return state_ ? state_->members : std::vector<PeerId>{}; }

Result<Peer> Peer::new_group(std::vector<PeerId> members) {
  if (!state_) return no_peer();
  PeerState& s = *state_;
  if (s.finished) return Status(Errc::finished, "peer " + std::to_string(s.id) + " has already finished");
  GroupRequestData g;
  g.members = members;
  Status st;
  auto reply = group_request(s, std::move(g), st);
  if (!st) return st;
  auto ns = std::make_shared<PeerState>();
  ns->rt = s.rt;
  ns->id = s.id;
  ns->config = s.config;
  ns->epoch = s.epoch;
  ns->group = reply->group;
  ns->members = std::move(members);
  ns->rank = static_cast<uint32_t>(std::find(ns->members.begin(), ns->members.end(), s.id) - ns->members.begin());
  return Peer(std::move(ns));
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

Status Peer::send(const Tensor& t, PeerId dst, uint64_t tag) {
  if (!state_) return no_peer();
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
