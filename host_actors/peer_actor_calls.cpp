#include "host_actors/peer_actor_calls.hpp"

namespace chorus {

namespace {

OpCall make_call(OpKind k, Tensor in, Tensor out, ReduceOp op = ReduceOp::sum, PeerId root = 0,
                 uint32_t other = 0, uint64_t tag = 0) {
  return {k, op, root, other, tag, std::move(in), std::move(out), false};
}

} // namespace

OpCall OpCall::all_reduce(Tensor in, Tensor out, ReduceOp op) { return make_call(OpKind::all_reduce, in, out, op); }
OpCall OpCall::reduce(Tensor in, Tensor out, ReduceOp op, PeerId root) { return make_call(OpKind::reduce, in, out, op, root); }
OpCall OpCall::broadcast(Tensor buf, PeerId root) { return make_call(OpKind::broadcast, Tensor(), buf, ReduceOp::sum, root); }
OpCall OpCall::all_gather(Tensor in, Tensor out) { return make_call(OpKind::all_gather, in, out); }
OpCall OpCall::reduce_scatter(Tensor in, Tensor out, ReduceOp op) { return make_call(OpKind::reduce_scatter, in, out, op); }
OpCall OpCall::all_to_all(Tensor in, Tensor out) { return make_call(OpKind::all_to_all, in, out); }
OpCall OpCall::gather(Tensor in, Tensor out, PeerId root) { return make_call(OpKind::gather, in, out, ReduceOp::sum, root); }
OpCall OpCall::scatter(Tensor in, Tensor out, PeerId root) { return make_call(OpKind::scatter, in, out, ReduceOp::sum, root); }
OpCall OpCall::barrier() { return make_call(OpKind::barrier, Tensor(), Tensor()); }
OpCall OpCall::send(Tensor t, PeerId dst, uint64_t tag) { return make_call(OpKind::send, t, Tensor(), ReduceOp::sum, 0, dst, tag); }
OpCall OpCall::recv(Tensor t, PeerId src, uint64_t tag) { return make_call(OpKind::recv, Tensor(), t, ReduceOp::sum, 0, src, tag); }
OpCall OpCall::recv_any(Tensor t, uint64_t tag) {
  OpCall c = make_call(OpKind::recv, Tensor(), t, ReduceOp::sum, 0, 0, tag);
  c.any_source = true;
  return c;
}

ByDataCall ByDataCall::broadcast(std::optional<Tensor> data) { return {OpKind::broadcast, std::move(data)}; }
ByDataCall ByDataCall::scatter(std::optional<Tensor> data) { return {OpKind::scatter, std::move(data)}; }

ObjectCall ObjectCall::all_gather(std::string mine) { return {ObjectOp::all_gather_object, std::move(mine)}; }
ObjectCall ObjectCall::broadcast(std::optional<std::string> data) { return {ObjectOp::broadcast_object, std::move(data)}; }

TensorsCall TensorsCall::all_gather_v(Tensor in) { return {TensorsOp::all_gather_v, std::move(in), 0}; }
TensorsCall TensorsCall::gather_v(Tensor in, PeerId root) { return {TensorsOp::gather_v, std::move(in), root}; }
TensorsCall TensorsCall::all_reduce_coalesced(std::vector<Tensor> list, ReduceOp redop) {
  return {TensorsOp::all_reduce_coalesced, {}, 0, std::move(list), redop};
}

GroupCall GroupCall::new_group(std::vector<PeerId> members) { return {GroupOp::new_group, std::move(members), 0, 0}; }
GroupCall GroupCall::split(int color, int key) { return {GroupOp::split, {}, color, key}; }
GroupCall GroupCall::intra_node() { return {GroupOp::intra_node, {}, 0, 0}; }
GroupCall GroupCall::inter_node() { return {GroupOp::inter_node, {}, 0, 0}; }
GroupCall GroupCall::destroy() { return {GroupOp::destroy, {}, 0, 0}; }

GradCall GradCall::register_params(std::vector<ParamSpec> params, GradSyncOptions options) {
  GradCall c;
  c.op = GradOp::register_params;
  c.params = std::move(params);
  c.options = options;
  return c;
}
GradCall GradCall::submit(uint64_t id, Tensor grad) {
  GradCall c;
  c.op = GradOp::submit;
  c.id = id;
  c.grad = std::move(grad);
  return c;
}
GradCall GradCall::sync() { return GradCall{}; }
GradCall GradCall::reduced(uint64_t id) {
  GradCall c;
  c.op = GradOp::reduced;
  c.id = id;
  return c;
}

namespace peer_actor_calls {

ReadyDone ready(const Peer& p) {
  return {Status::ok(), p.id(), p.rank(), p.size(), p.group(), p.node(), p.members()};
}

OpDone run(Peer& p, OpCall& c) {
  Tensor& in = c.input;
  Tensor& out = c.output.defined() ? c.output : c.input;
  auto done = [&](Status s) { return OpDone{std::move(s), out, 0}; };
  switch (c.kind) {
    case OpKind::all_reduce: return done(p.all_reduce(in, out, c.redop));
    case OpKind::reduce: return done(p.reduce(in, out, c.redop, c.root));
    case OpKind::broadcast: return done(p.broadcast(out, c.root));
    case OpKind::all_gather: return done(p.all_gather(in, out));
    case OpKind::reduce_scatter: return done(p.reduce_scatter(in, out, c.redop));
    case OpKind::all_to_all: return done(p.all_to_all(in, out));
    case OpKind::gather: return done(p.gather(in, out, c.root));
    case OpKind::scatter: return done(p.scatter(in, out, c.root));
    case OpKind::barrier: return done(p.barrier());
    case OpKind::send: return done(p.send(in, c.other, c.tag));
    case OpKind::recv: {
      if (!c.any_source) return OpDone{p.recv(out, c.other, c.tag), out, c.other};
      auto from = p.recv_any(out, c.tag);
      return OpDone{from.status(), out, from ? *from : 0};
    }
  }
  return done({Errc::invalid_argument, "unknown op kind " + std::to_string(static_cast<int>(c.kind))});
}

ByDataDone run(Peer& p, ByDataCall& c) {
  Result<Tensor> r = Status(Errc::invalid_argument, "a by-data call is a broadcast or a scatter, not " +
                                                        std::string(to_string(c.kind)));
  if (c.kind == OpKind::broadcast) r = p.broadcast(std::move(c.data));
  if (c.kind == OpKind::scatter) r = p.scatter(std::move(c.data));
  if (!r) return {r.status(), Tensor()};
  return {Status::ok(), std::move(*r)};
}

ObjectDone run(Peer& p, ObjectCall& c) {
  if (c.op == ObjectOp::broadcast_object) {
    auto r = p.broadcast_object(std::move(c.data));
    if (!r) return {r.status(), {}};
    return {Status::ok(), {std::move(*r)}};
  }
  if (!c.data) return {{Errc::invalid_argument, "all_gather_object: every peer passes its bytes (data is empty)"}, {}};
  auto r = p.all_gather_object(*c.data);
  if (!r) return {r.status(), {}};
  return {Status::ok(), std::move(*r)};
}

TensorsDone run(Peer& p, TensorsCall& c) {
  if (c.op == TensorsOp::all_reduce_coalesced) {
    Status s = p.all_reduce_coalesced(c.list, c.redop);
    return {s, std::move(c.list)};
  }
  auto r = c.op == TensorsOp::gather_v ? p.gather_v(c.input, c.root) : p.all_gather_v(c.input);
  if (!r) return {r.status(), {}};
  return {Status::ok(), std::move(*r)};
}

Result<Peer> create_group(Peer& p, const GroupCall& c) {
  switch (c.op) {
    case GroupOp::new_group: return p.new_group(c.members);
    case GroupOp::split: return p.split(c.color, c.key);
    case GroupOp::intra_node: return p.intra_node();
    case GroupOp::inter_node: return p.inter_node();
    case GroupOp::destroy: break;
  }
  return Status(Errc::invalid_argument, "group call " + std::to_string(static_cast<int>(c.op)) + " creates no group");
}

} // namespace peer_actor_calls

} // namespace chorus
