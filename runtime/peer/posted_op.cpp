#include "runtime/peer/posted_op.hpp"

#include "actors/global_client/global_client.hpp"
#include "core/op_kinds.hpp"
#include "runtime/runtime_impl.hpp"

namespace chorus::peer_impl {

bool PostedOp::done() const {
  if (!failed) return true;
  if (!reply || mailbox || reply->done.value.load(std::memory_order_acquire) == 0) return false;
  return reply->copied || !reply->status;  // not a plan of the two, which its body runs
}

void post_send(PeerState& s, PostedOp& p, const Tensor& t, PeerId dst, uint64_t tag) {
  Status st;
  p.reply = enter_request(s, p.rec, make_p2p(OpKind::send, dst, tag), t, Tensor(), st);
  p.failed = st;
}

void post_recv(PeerState& s, PostedOp& p, const Tensor& t, PeerId src, uint64_t tag, bool any) {
  const PeerId me = s.offset + s.id;
  Status st;
  if (!any) {
    if (on_other_node(s, src)) {  // its messages come to the mailbox
      if (s.finished) return;     // the body says so
      p.global = s.global;
      p.mailbox = std::make_unique<P2PMailbox::Posted>(s.global->p2p(), P2PMailbox::Key{s.group, s.members[src], me, tag});
      return;
    }
    p.reply = enter_request(s, p.rec, make_p2p(OpKind::recv, src, tag), Tensor(), t, st);
    p.failed = st;
    return;
  }
  const AnySenders who = any_senders(s);
  if (!who.here && who.remote.empty()) return;  // alone in its group: the body says so
  OpRequestData req = make_p2p(OpKind::recv, kAnySource, tag);
  req.any_source = true;
  if (who.remote.empty()) {  // the local server pairs it
    p.reply = enter_request(s, p.rec, std::move(req), Tensor(), t, st);
    p.failed = st;
    return;
  }
  // Sends of other nodes arrive in the mailbox, those of this node's ranks at the server: it
  // waits in both, the server's request entered without waiting (recv_any.cpp).
  if (p.failed = callable(s); !p.failed) return;
  record_begin(s, p.rec, req, t);
  if (who.here) {
    Call call = op_call(s, req, Tensor(), t);
    p.reply = call.reply;
    p.reply->also_wake = [w = std::weak_ptr<GlobalClient>(s.global)] {
      if (auto g = w.lock()) g->p2p().wake();
    };
    s.rt->core->on_op(std::move(call));
  }
  p.global = s.global;
  // Once the server paired it, it takes nothing here: later receives are not held back for it
  // while its line has yet to run it (the reply's also_wake wakes them).
  std::function<bool()> waits;
  if (p.reply) waits = [r = p.reply] { return r->done.value.load(std::memory_order_acquire) == 0; };
  p.mailbox = std::make_unique<P2PMailbox::Posted>(s.global->p2p(), P2PMailbox::Key{s.group, kAnySource, me, tag},
                                                   std::move(waits));
}

std::shared_ptr<Reply> server_answer(PeerState& s, OpRecord& rec, PostedOp* posted, const OpRequestData& req,
                                     const Tensor& in, const Tensor& out, Status& status) {
  if (!posted) return request(s, rec, req, in, out, status);
  status = await_request(s, rec, posted->reply, Clock::now());
  return posted->reply;
}

} // namespace chorus::peer_impl
