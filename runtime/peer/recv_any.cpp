// A receive from any source (Peer::recv_any, MPI_ANY_SOURCE): the first send to this peer with
// the tag, from whichever rank of the handle's group. Within a node the local server pairs it as
// any receive (a send goes to the receive, from it or from any source, that came first). Across
// nodes, other nodes' sends arrive in the global client's mailbox instead, so the receive waits on
// both: it enters the server without waiting, and takes whichever comes first. Where a mailbox
// message wins, the server's request is withdrawn; where the server paired it meanwhile, the
// message goes back first in its queue for the next receive.
#include "actors/global_client/global_client.hpp"
#include "core/op_kinds.hpp"
#include "cuda/staging.hpp"
#include "runtime/peer/posted_op.hpp"
#include "runtime/peer/run_op.hpp"
#include "runtime/runtime_impl.hpp"

namespace chorus::peer_impl {

namespace {

// The rank in the handle's group of the peer with global id `g` (the server pairs only sends of
// the receive's group, the mailbox only its members' messages).
Result<PeerId> rank_of(const PeerState& s, uint32_t g) {
  for (std::size_t i = 0; i < s.members.size(); ++i)
    if (s.members[i] == g) return static_cast<PeerId>(i);
  return Status(Errc::internal, "recv_any: its sender, peer " + std::to_string(g) + ", is not in the group");
}

// The pairing the local server made, where the receive entered it without waiting: this peer's
// part of the two-peer plan (nothing, where the pair was copied as it was paired).
Result<PeerId> run_paired(PeerState& s, OpRecord& rec, Reply& r, Tensor& t) {
  if (Status st = r.status; !st) return record_end(s, rec, st);
  record_matched(s, rec, r.strategy);
  if (Status st = execute(s, rec, r, nullptr, bytes(t)); !st) return st;
  return rank_of(s, s.offset + r.source);
}

// The message another node's peer sent: checked against `t`, copied in, and answered. A receive
// whose stream's earlier work did not finish takes it all the same (the sender is answered), and
// fails.
Result<PeerId> take_message(PeerState& s, OpRecord& rec, const P2PMailbox::Key& k, const P2PMailbox::Message& m,
                            Tensor& t, Clock::time_point deadline) {
  record_matched(s, rec, RunStrategy::of(RunStrategy::Path::p2p));
  Status st;
  if (Status why = start_failure(); !why) {
    Tensor drop = Tensor::zeros(t.dtype(), t.shape());
    (void)s.global->take_delivered(k, m, drop, deadline);
    st = why;
  } else if (!t.is_cuda()) {
    st = s.global->take_delivered(k, m, t, deadline);
  } else {
    Tensor host = Tensor::zeros(t.dtype(), t.shape());
    st = s.global->take_delivered(k, m, host, deadline);
    if (st) st = stage_back(host, t);
  }
  if (!(st = record_end(s, rec, st))) return st;
  return rank_of(s, k.source);
}

} // namespace

AnySenders any_senders(const PeerState& s) {
  AnySenders who;
  const uint32_t me = s.offset + s.id;
  for (uint32_t g : s.members) {
    if (g == me) continue;
    if (!s.global || s.global->node_of(g) == s.global->node_id()) {
      who.here = true;
      continue;
    }
    who.remote.push_back(g);
    who.nodes.push_back(s.global->node_of(g));
  }
  return who;
}

Result<PeerId> recv_any_now(PeerState& s, Tensor& t, uint64_t tag, PostedOp* posted) {
  OpRequestData req = make_p2p(OpKind::recv, kAnySource, tag);
  req.any_source = true;
  const uint32_t me = s.offset + s.id;
  const AnySenders who = any_senders(s);
  const auto& [remote, nodes, here] = who;
  if (!here && remote.empty())
    return Status(Errc::invalid_argument, "recv_any: rank " + std::to_string(s.rank) + " is alone in its group");
  if (posted && !posted->failed) return posted->failed;  // it could not enter at its call
  OpRecord own;
  OpRecord& rec = posted ? posted->rec : own;
  if (remote.empty()) {  // the local server pairs it
    Status st;
    auto reply = server_answer(s, rec, posted, req, Tensor(), t, st);
    if (!st) return st;
    if (!(st = execute(s, rec, *reply, nullptr, bytes(t)))) return st;
    return rank_of(s, s.offset + reply->source);
  }
  const auto timeout = op_timeout(s);
  const auto deadline = Clock::now() + timeout;
  std::shared_ptr<Reply> reply = posted ? posted->reply : nullptr;
  if (!posted) {
    if (Status st = callable(s); !st) return st;
    record_begin(s, rec, req, t);
  }
  if (here && !posted) {
    Call call = op_call(s, req, Tensor(), t);
    reply = call.reply;
    reply->also_wake = [w = std::weak_ptr<GlobalClient>(s.global)] {
      if (auto g = w.lock()) g->p2p().wake();
    };
    s.rt->core->on_op(std::move(call));
  }
  auto paired = [&reply] { return reply && reply->done.value.load(std::memory_order_acquire) != 0; };
  P2PMailbox::Key k;
  P2PMailbox::Message m;
  Status why;
  auto took = s.global->p2p().take_any(s.group, me, tag, remote, nodes, s.global->poller(), deadline, paired, k, m, why,
                                       posted ? posted->ticket() : 0);
  if (took == P2PMailbox::Took::ended && reply) {
    // The other nodes are gone (lost or left) but this node's ranks may still send: wait for them.
    (void)reply->done.wait_at_least(1, deadline);
    took = P2PMailbox::Took::nothing;
  }
  if (took != P2PMailbox::Took::stopped && reply && !s.rt->core->withdraw(reply->timer)) {
    // The server paired it (or ended it) meanwhile: that pairing stands.
    if (took == P2PMailbox::Took::it) {
      const uint64_t id = m.id;
      if (s.global->p2p().put_back(k, std::move(m))) s.global->answer_withdrawn(k, id);  // its send gave up meanwhile
    }
    took = P2PMailbox::Took::stopped;
  }
  switch (took) {
    case P2PMailbox::Took::it: s.global->p2p().keep(k, m.id); return take_message(s, rec, k, m, t, deadline);
    case P2PMailbox::Took::ended: return record_end(s, rec, why);
    case P2PMailbox::Took::nothing:
      return record_end(s, rec, Status(Errc::timeout, "recv any->" + std::to_string(s.rank) + " tag " + std::to_string(tag) +
                                                          ": no rank sent to rank " + std::to_string(s.rank) +
                                                          " with tag " + std::to_string(tag) + " within " +
                                                          std::to_string(timeout.count()) + " ms"));
    case P2PMailbox::Took::stopped: break;
  }
  if (!reply->done.wait_at_least(1, Clock::now() + RuntimeImpl::grace))
    return record_end(s, rec, Status(Errc::timeout, "recv any: the local server did not answer"));
  return run_paired(s, rec, *reply, t);
}

} // namespace chorus::peer_impl
