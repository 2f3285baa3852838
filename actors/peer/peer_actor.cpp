#include <chorus/peer_actor.hpp>

#include "actors/runtime_impl.hpp"

namespace chorus {

namespace {

OpCall make_call(OpKind k, Tensor in, Tensor out, ReduceOp op = ReduceOp::sum, PeerId root = 0,
                 uint32_t other = 0, uint64_t tag = 0) {
  return {k, op, root, other, tag, std::move(in), std::move(out)};
}

// Runs one call on the blocking API; returns the status and the buffer holding the result.
Status dispatch(Peer& p, OpCall& r, Tensor& result) {
  Tensor& in = r.input;
  Tensor& out = r.output.defined() ? r.output : r.input;
  result = out;
  switch (r.kind) {
    case OpKind::all_reduce: return p.all_reduce(in, out, r.redop);
    case OpKind::reduce: return p.reduce(in, out, r.redop, r.root);
    case OpKind::broadcast: return p.broadcast(out, r.root);
    case OpKind::all_gather: return p.all_gather(in, out);
    case OpKind::reduce_scatter: return p.reduce_scatter(in, out, r.redop);
    case OpKind::all_to_all: return p.all_to_all(in, out);
    case OpKind::gather: return p.gather(in, out, r.root);
    case OpKind::scatter: return p.scatter(in, out, r.root);
    case OpKind::barrier: return p.barrier();
    case OpKind::send: return p.send(in, r.other, r.tag);
    case OpKind::recv: return p.recv(out, r.other, r.tag);
  }
  return {Errc::invalid_argument, "unknown op kind " + std::to_string(static_cast<int>(r.kind))};
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

Result<peer_actor> spawn_peer_actor(Runtime& rt, PeerId id, const Config& config) {
  auto peer = rt.register_peer(id, config);
  if (!peer) return peer.status();
  auto impl = [p = *peer](peer_actor::pointer self) mutable -> peer_actor::behavior_type {
    self->attach_functor([p]() mutable { (void)p.finish(); });
    return {
        [p](OpCall& c) mutable -> OpDone {
          Tensor result;
          Status s = dispatch(p, c, result);
          return {std::move(s), std::move(result)};
        },
    };
  };
  // Detached: the blocking calls run on the actor's own thread, never on a scheduler worker.
  peer_actor a = actor_system_of(rt).spawn<caf::detached>(impl);
  std::lock_guard<std::mutex> lk(RuntimeAccess::impl(rt).owned_mu);
  RuntimeAccess::impl(rt).owned.push_back(caf::actor_cast<caf::actor>(a));
  return a;
}

caf::actor_system& actor_system_of(Runtime& rt) { return *RuntimeAccess::impl(rt).system; }

} // namespace chorus
