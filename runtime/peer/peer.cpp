// The Peer API's entry points: the handle's identity and the fixed-size ops, blocking and not.
// Each op says once what this peer passes (a Part) and runs it on the handle's lane
// (op_lanes.hpp) through the ordinary machinery (run_op.hpp); groups, the by-data forms, object
// collectives and finish live in the files named for them.
#include <chorus/peer.hpp>

#include "actors/global_client/global_client.hpp"
#include "core/op_kinds.hpp"
#include "runtime/peer/op_lanes.hpp"
#include "runtime/peer/posted_op.hpp"
#include "runtime/peer/run_op.hpp"
#include "strategies/planner.hpp"

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
using peer_impl::PostedOp;

// `posted`: the send as posted at its call (posted_op.hpp); null: it enters now.
Status send_now(PeerState& s, const Tensor& t, PeerId dst, uint64_t tag, PostedOp* posted) {
  if (on_other_node(s, dst)) return peer_impl::send_to_node(s, t, dst, tag);
  if (posted && !posted->failed) return posted->failed;
  Status st;
  peer_impl::OpRecord own;
  peer_impl::OpRecord& rec = posted ? posted->rec : own;
  auto reply = peer_impl::server_answer(s, rec, posted, make_p2p(OpKind::send, dst, tag), t, Tensor(), st);
  if (!st) return st;
  // The sender is rank 0 of a two-peer broadcast, in place: its buffer is only read (a small pair
  // was copied as it was paired: nothing is left to run).
  return peer_impl::execute(s, rec, *reply, bytes(t), bytes(t));
}

// `posted`: the receive as posted at its call; null: it enters now.
Status recv_now(PeerState& s, Tensor& t, PeerId src, uint64_t tag, PostedOp* posted) {
  if (on_other_node(s, src)) return peer_impl::recv_from_node(s, t, src, tag, posted);
  if (posted && !posted->failed) return posted->failed;
  Status st;
  peer_impl::OpRecord own;
  peer_impl::OpRecord& rec = posted ? posted->rec : own;
  auto reply = peer_impl::server_answer(s, rec, posted, make_p2p(OpKind::recv, src, tag), Tensor(), t, st);
  if (!st) return st;
  return peer_impl::execute(s, rec, *reply, nullptr, bytes(t));
}

// A send's or receive's two steps (posted_op.hpp): its entry at its call, and its body on its
// lane (or, where the entry found it done, on the caller's thread at once). Host sends and
// receives post themselves at the call; one on a GPU tensor or ordered in a stream, or a send to
// another node or above CHORUS_P2P_LOCAL_EAGER_KIB, enters in its body (it is "late"), and so
// does a host op called while a late one is queued or running on its lane, which it must not
// overtake (PeerState::late_ops counts them).
struct P2pCall {
  PeerState* s;
  bool send;
  Tensor t;
  PeerId other;  // kAnySource where `any`
  uint64_t tag;
  bool any;    // a receive from any source (not a recv whose src is out of range)
  bool may_post;  // a host tensor, not ordered in a stream, and where a send, posts_at_call
  bool late = false;  // it enters in its body (counted on its lane), not at its call
  std::chrono::milliseconds timeout;  // OpOptions::timeout: the posted request carries it
  PostedOp posted;

  P2pCall(PeerState* state, bool is_send, const Tensor& tensor, PeerId peer, uint64_t tg, bool from_any,
          const OpOptions& o)
      : s(state), send(is_send), t(tensor), other(from_any ? kAnySource : peer), tag(tg), any(from_any),
        may_post(!tensor.is_cuda() && !o.stream && (!is_send || posts_at_call(state, tensor, peer))),
        timeout(o.timeout) {}
  // A send enters at its call only where its pair will be copied as it pairs (a null state: the
  // handle was never registered, which the call says). A larger one would pair at its call with
  // a receive posted earlier, and its plan's deadline would run from then while the sends ahead
  // of it on its lane still ran theirs: it pairs when its body starts, as its timeout does.
  static bool posts_at_call(const PeerState* state, const Tensor& t, PeerId dst) {
    return !state || (!on_other_node(*state, dst) && plan_pair_copy_at_pairing(t.nbytes()));
  }
  PeerState::P2pKey lane() const { return {send, other, tag}; }
  // Under p2p_mu, in the step that takes its place in its lane: true where it is done already.
  bool enter() {
    auto it = s->late_ops.find(lane());
    late = !may_post || it != s->late_ops.end();
    if (!late) {
      peer_impl::OpTimeoutScope scope(timeout);  // at the call, before its body puts it in force
      if (send) peer_impl::post_send(*s, posted, t, other, tag);
      else peer_impl::post_recv(*s, posted, t, other, tag, any);
      return posted.done();
    }
    if (it != s->late_ops.end()) ++it->second;
    else s->late_ops.emplace(lane(), 1);
    return false;
  }
  PostedOp* at_call() { return late ? nullptr : &posted; }
  // At the end of its body (not when its task goes, after its Work's callbacks): its places go,
  // and a late one leaves the count.
  void ended() {
    posted.mailbox.reset();  // before the client that owns the mailbox
    posted.reply.reset();
    posted.global.reset();
    if (!late) return;
    std::lock_guard<std::mutex> lk(s->p2p_mu);
    auto it = s->late_ops.find(lane());
    if (it != s->late_ops.end() && --it->second == 0) s->late_ops.erase(it);
  }
};

struct Ended {
  P2pCall& c;
  ~Ended() { c.ended(); }
};

// A blocking send or receive before the handle's first non-blocking op: nothing is queued ahead of
// it (and blocking calls of several threads at once have no order), so it enters as it runs, as
// before sends and receives were posted, on the caller's thread.
bool nothing_queued(const std::shared_ptr<PeerState>& s) {
  return s && !s->lanes_used.load(std::memory_order_acquire);
}
} // namespace

Status Peer::send(const Tensor& t, PeerId dst, uint64_t tag) {
  if (nothing_queued(state_)) return send_now(*state_, t, dst, tag, nullptr);
  P2pCall c(state_.get(), true, t, dst, tag, false, {});
  return run_now_entered(state_, LaneKey::p2p(LaneKey::send, dst, tag), [&] { return c.enter(); },
                         [&](WorkState&) {
                           Ended end{c};
                           return send_now(*state_, t, dst, tag, c.at_call());
                         });
}

Status Peer::recv(Tensor& t, PeerId src, uint64_t tag) {
  if (nothing_queued(state_)) return recv_now(*state_, t, src, tag, nullptr);
  P2pCall c(state_.get(), false, t, src, tag, false, {});
  return run_now_entered(state_, LaneKey::p2p(LaneKey::recv, src, tag), [&] { return c.enter(); },
                         [&](WorkState&) {
                           Ended end{c};
                           return recv_now(*state_, t, src, tag, c.at_call());
                         });
}

Work Peer::send_async(const Tensor& t, PeerId dst, uint64_t tag, OpOptions o) {
  auto c = std::make_shared<P2pCall>(state_.get(), true, t, dst, tag, false, o);
  return run_async(
      state_, LaneKey::p2p(LaneKey::send, dst, tag), o,
      [c](WorkState&) {
        Ended end{*c};
        return send_now(*c->s, c->t, c->other, c->tag, c->at_call());
      },
      [c] { return c->enter(); });
}

Work Peer::recv_async(Tensor& t, PeerId src, uint64_t tag, OpOptions o) {
  auto c = std::make_shared<P2pCall>(state_.get(), false, t, src, tag, false, o);
  return run_async(
      state_, LaneKey::p2p(LaneKey::recv, src, tag), o,
      [c](WorkState& w) {
        Ended end{*c};
        Status st = recv_now(*c->s, c->t, c->other, c->tag, c->at_call());
        if (st) {
          w.tensors.push_back(c->t);
          w.source = c->other;
        }
        return st;
      },
      [c] { return c->enter(); });
}

// A receive from any source runs on a lane of its own per tag, beside the receives from each rank.
Result<PeerId> Peer::recv_any(Tensor& t, uint64_t tag) {
  if (nothing_queued(state_)) return peer_impl::recv_any_now(*state_, t, tag, nullptr);
  PeerId from = kAnySource;
  P2pCall c(state_.get(), false, t, kAnySource, tag, true, {});
  Status st = run_now_entered(state_, LaneKey::p2p(LaneKey::recv, kAnySource, tag), [&] { return c.enter(); },
                              [&](WorkState&) -> Status {
                                Ended end{c};
                                auto r = peer_impl::recv_any_now(*state_, t, tag, c.at_call());
                                if (!r) return r.status();
                                from = *r;
                                return Status::ok();
                              });
  if (!st) return st;
  return from;
}

Work Peer::recv_any_async(Tensor& t, uint64_t tag, OpOptions o) {
  auto c = std::make_shared<P2pCall>(state_.get(), false, t, kAnySource, tag, true, o);
  return run_async(
      state_, LaneKey::p2p(LaneKey::recv, kAnySource, tag), o,
      [c](WorkState& w) {
        Ended end{*c};
        auto r = peer_impl::recv_any_now(*c->s, c->t, c->tag, c->at_call());
        if (!r) return r.status();
        w.tensors.push_back(c->t);
        w.source = *r;
        return Status::ok();
      },
      [c] { return c->enter(); });
}

} // namespace chorus
