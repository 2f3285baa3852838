// The Peer API's entry points: the handle's identity and the fixed-size ops, blocking and not.
// Each op says once what this peer passes (a Part) and runs it on the handle's lane
// (op_lanes.hpp) through the ordinary machinery (run_op.hpp); groups, the by-data forms, object
// collectives and finish live in the files named for them.
#include <chorus/peer.hpp>

#include "actors/global_client/global_client.hpp"
#include "core/op_kinds.hpp"
#include "runtime/peer/op_lanes.hpp"
#include "runtime/peer/posted_recv.hpp"
#include "runtime/peer/run_op.hpp"

namespace chorus {

using peer_impl::bytes;
using peer_impl::collective;
using peer_impl::make_op;
using peer_impl::make_p2p;

PeerId Peer::id() const { return state_ ? state_->offset + state_->id : 0; }
uint32_t Peer::size() const { return state_ ? static_cast<uint32_t>(state_->members.size()) : 0; }
uint32_t Peer::rank() const { return state_ ? state_->rank : 0; }
uint32_t Peer::group() const { return state_ ? state_->group : 0; }
std::vector<PeerId> Peer::members() const { return state_ ? state_->members : std::vector<PeerId>{}; }
std::string Peer::last_strategy() const {
  return state_ ? to_string(unpack_strategy(state_->last_strategy.load(std::memory_order_relaxed))) : std::string();
}

namespace {
using peer_impl::LaneKey;
using peer_impl::run_async;
using peer_impl::run_now;

const Tensor kNone;

// One fixed-size op as this peer takes part in it: what it passes as input and output (a rooted
// op's root alone passes what only the root has; elsewhere the output is not touched).
struct Part {
  OpRequestData req;
  const Tensor& in;
  const Tensor& out;
};

bool is_root(const std::shared_ptr<PeerState>& s, PeerId root) { return s && s->rank == root; }

Status now(const std::shared_ptr<PeerState>& s, const Part& p) {
  return run_now(s, LaneKey::collective(), [&](WorkState&) { return collective(s.get(), p.req, p.in, p.out); });
}

// The op keeps its own handles of the buffers (they share the caller's memory) and gives back
// the output it wrote.
Work later(const std::shared_ptr<PeerState>& s, const Part& p, const OpOptions& o) {
  return run_async(s, LaneKey::collective(), o, [s = s.get(), req = p.req, in = p.in, out = p.out](WorkState& w) {
    Status st = collective(s, req, in, out);
    if (st && out.defined()) w.tensors.push_back(out);
    return st;
  });
}

Part reduce_part(const std::shared_ptr<PeerState>& s, const Tensor& in, const Tensor& out, ReduceOp op, PeerId root) {
  return {make_op(OpKind::reduce, op, root), in, is_root(s, root) ? out : kNone};
}
Part broadcast_part(const std::shared_ptr<PeerState>& s, const Tensor& buf, PeerId root) {
  return {make_op(OpKind::broadcast, ReduceOp::sum, root), is_root(s, root) ? buf : kNone, buf};
}
Part gather_part(const std::shared_ptr<PeerState>& s, const Tensor& in, const Tensor& out, PeerId root) {
  return {make_op(OpKind::gather, ReduceOp::sum, root), in, is_root(s, root) ? out : kNone};
}
Part scatter_part(const std::shared_ptr<PeerState>& s, const Tensor& in, const Tensor& out, PeerId root) {
  return {make_op(OpKind::scatter, ReduceOp::sum, root), is_root(s, root) ? in : kNone, out};
}
} // namespace

Status Peer::all_reduce(Tensor& inout, ReduceOp op) { return all_reduce(inout, inout, op); }
Status Peer::all_reduce(const Tensor& in, Tensor& out, ReduceOp op) {
  return now(state_, {make_op(OpKind::all_reduce, op), in, out});
}
Status Peer::reduce(Tensor& inout, ReduceOp op, PeerId root) { return reduce(inout, inout, op, root); }
Status Peer::reduce(const Tensor& in, Tensor& out, ReduceOp op, PeerId root) {
  return now(state_, reduce_part(state_, in, out, op, root));
}
Status Peer::broadcast(Tensor& buf, PeerId root) { return now(state_, broadcast_part(state_, buf, root)); }
Status Peer::all_gather(const Tensor& in, Tensor& out) { return now(state_, {make_op(OpKind::all_gather), in, out}); }
Status Peer::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  return now(state_, {make_op(OpKind::reduce_scatter, op), in, out});
}
Status Peer::all_to_all(const Tensor& in, Tensor& out) { return now(state_, {make_op(OpKind::all_to_all), in, out}); }
Status Peer::gather(const Tensor& in, Tensor& out, PeerId root) { return now(state_, gather_part(state_, in, out, root)); }
Status Peer::scatter(const Tensor& in, Tensor& out, PeerId root) {
  return now(state_, scatter_part(state_, in, out, root));
}
Status Peer::barrier() { return now(state_, {make_op(OpKind::barrier), kNone, kNone}); }

Work Peer::all_reduce_async(Tensor& inout, ReduceOp op, OpOptions o) { return all_reduce_async(inout, inout, op, o); }
Work Peer::all_reduce_async(const Tensor& in, Tensor& out, ReduceOp op, OpOptions o) {
  return later(state_, {make_op(OpKind::all_reduce, op), in, out}, o);
}
Work Peer::reduce_async(Tensor& inout, ReduceOp op, PeerId root, OpOptions o) { return reduce_async(inout, inout, op, root, o); }
Work Peer::reduce_async(const Tensor& in, Tensor& out, ReduceOp op, PeerId root, OpOptions o) {
  return later(state_, reduce_part(state_, in, out, op, root), o);
}
Work Peer::broadcast_async(Tensor& buf, PeerId root, OpOptions o) { return later(state_, broadcast_part(state_, buf, root), o); }
Work Peer::all_gather_async(const Tensor& in, Tensor& out, OpOptions o) {
  return later(state_, {make_op(OpKind::all_gather), in, out}, o);
}
Work Peer::reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op, OpOptions o) {
  return later(state_, {make_op(OpKind::reduce_scatter, op), in, out}, o);
}
Work Peer::all_to_all_async(const Tensor& in, Tensor& out, OpOptions o) {
  return later(state_, {make_op(OpKind::all_to_all), in, out}, o);
}
Work Peer::gather_async(const Tensor& in, Tensor& out, PeerId root, OpOptions o) {
  return later(state_, gather_part(state_, in, out, root), o);
}
Work Peer::scatter_async(const Tensor& in, Tensor& out, PeerId root, OpOptions o) {
  return later(state_, scatter_part(state_, in, out, root), o);
}
Work Peer::barrier_async(OpOptions o) { return later(state_, {make_op(OpKind::barrier), kNone, kNone}, o); }

namespace {
using peer_impl::on_other_node;

Status send_now(PeerState& s, const Tensor& t, PeerId dst, uint64_t tag) {
  if (on_other_node(s, dst)) return peer_impl::send_to_node(s, t, dst, tag);
  OpRequestData req = make_p2p(OpKind::send, dst, tag);
  Status st;
  peer_impl::OpRecord rec;
  auto reply = peer_impl::request(s, rec, req, t, Tensor(), st);
  if (!st) return st;
  // The sender is rank 0 of a two-peer broadcast, in place: its buffer is only read.
  return peer_impl::execute(s, rec, *reply, bytes(t), bytes(t));
}

using peer_impl::PostedRecv;

// `posted`: the receive as posted at its call (posted_recv.hpp); null: it enters now.
Status recv_now(PeerState& s, Tensor& t, PeerId src, uint64_t tag, PostedRecv* posted) {
  if (on_other_node(s, src)) return peer_impl::recv_from_node(s, t, src, tag, posted);
  if (posted && !posted->failed) return posted->failed;
  Status st;
  peer_impl::OpRecord own;
  peer_impl::OpRecord& rec = posted ? posted->rec : own;
  std::shared_ptr<Reply> reply;
  if (posted) {
    reply = posted->reply;
    st = peer_impl::await_request(s, rec, reply, Clock::now());
  } else {
    reply = peer_impl::request(s, rec, make_p2p(OpKind::recv, src, tag), Tensor(), t, st);
  }
  if (!st) return st;
  return peer_impl::execute(s, rec, *reply, nullptr, bytes(t));
}

// Whether a receive posts itself at its call (posted_recv.hpp says which do not).
bool posts_at_call(const Tensor& t, const OpOptions& o) { return !t.is_cuda() && !o.stream; }

// The receive `p` posted, or none where it does not post at its call. Its places go once its body
// ends (not when its task goes, after its Work's callbacks): a later receive may wait for them.
struct PostedScope {
  PostedRecv* p;
  ~PostedScope() {
    if (!p) return;
    p->mailbox.reset();  // before the client that owns the mailbox
    p->reply.reset();
    p->global.reset();
  }
};
} // namespace

Status Peer::send(const Tensor& t, PeerId dst, uint64_t tag) {
  return run_now(state_, LaneKey::p2p(LaneKey::send, dst, tag), [&](WorkState&) { return send_now(*state_, t, dst, tag); });
}

Status Peer::recv(Tensor& t, PeerId src, uint64_t tag) {
  PostedRecv posted;
  const bool at_call = posts_at_call(t, {});
  auto enter = [&] {
    if (at_call) peer_impl::post_recv(*state_, posted, t, src, tag);
  };
  return run_now_entered(state_, LaneKey::p2p(LaneKey::recv, src, tag), enter,
                         [&](WorkState&) { return recv_now(*state_, t, src, tag, at_call ? &posted : nullptr); });
}

Work Peer::send_async(const Tensor& t, PeerId dst, uint64_t tag, OpOptions o) {
  return run_async(state_, LaneKey::p2p(LaneKey::send, dst, tag), o,
                   [s = state_.get(), t, dst, tag](WorkState&) { return send_now(*s, t, dst, tag); });
}

Work Peer::recv_async(Tensor& t, PeerId src, uint64_t tag, OpOptions o) {
  auto posted = posts_at_call(t, o) ? std::make_shared<PostedRecv>() : nullptr;
  auto enter = [s = state_.get(), posted, t, src, tag] { peer_impl::post_recv(*s, *posted, t, src, tag); };
  return run_async(
      state_, LaneKey::p2p(LaneKey::recv, src, tag), o,
      [s = state_.get(), t, src, tag, posted](WorkState& w) mutable {
        PostedScope scope{posted.get()};
        Status st = recv_now(*s, t, src, tag, posted.get());
        if (st) {
          w.tensors.push_back(t);
          w.source = src;
        }
        return st;
      },
      posted ? peer_impl::OpEntry(enter) : peer_impl::OpEntry());
}

// A receive from any source runs on a lane of its own per tag, beside the receives from each rank.
Result<PeerId> Peer::recv_any(Tensor& t, uint64_t tag) {
  PeerId from = kAnySource;
  PostedRecv posted;
  const bool at_call = posts_at_call(t, {});
  auto enter = [&] {
    if (at_call) peer_impl::post_recv(*state_, posted, t, kAnySource, tag);
  };
  Status st = run_now_entered(state_, LaneKey::p2p(LaneKey::recv, kAnySource, tag), enter, [&](WorkState&) -> Status {
    auto r = peer_impl::recv_any_now(*state_, t, tag, at_call ? &posted : nullptr);
    if (!r) return r.status();
    from = *r;
    return Status::ok();
  });
  if (!st) return st;
  return from;
}

Work Peer::recv_any_async(Tensor& t, uint64_t tag, OpOptions o) {
  auto posted = posts_at_call(t, o) ? std::make_shared<PostedRecv>() : nullptr;
  auto enter = [s = state_.get(), posted, t, tag] { peer_impl::post_recv(*s, *posted, t, kAnySource, tag); };
  return run_async(
      state_, LaneKey::p2p(LaneKey::recv, kAnySource, tag), o,
      [s = state_.get(), t, tag, posted](WorkState& w) mutable {
        PostedScope scope{posted.get()};
        auto r = peer_impl::recv_any_now(*s, t, tag, posted.get());
        if (!r) return r.status();
        w.tensors.push_back(t);
        w.source = *r;
        return Status::ok();
      },
      posted ? peer_impl::OpEntry(enter) : peer_impl::OpEntry());
}

} // namespace chorus
