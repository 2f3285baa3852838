// GPU tensors in the ops that need host memory: fixed-size ops across nodes, the by-data forms,
// and send/recv to a peer on another node. The data is copied to host memory for the op and the
// result copied back into the caller's GPU tensor (cuda/staging.hpp); a copy that fails still
// takes this peer's place in the op, so every peer gets the error instead of a timeout.
#include "actors/global_client/global_client.hpp"
#include "runtime/peer/posted_op.hpp"
#include "runtime/peer/run_op.hpp"
#include "cuda/staging.hpp"

namespace chorus::peer_impl {

namespace {
Clock::time_point deadline_of(const PeerState& s) { return Clock::now() + op_timeout(s); }
} // namespace

// Across nodes GPU tensors go through host memory: the op runs on host copies (the output copy
// starts as the output's content, since peers the op does not write into keep theirs), and the
// result is copied back into the caller's GPU tensor. An output the op ignores here (reduce and
// gather off the root) is left alone.
Status staged_collective(PeerState* s, OpRecord& rec, OpRequestData req, const Tensor& in, const Tensor& out) {
  const bool in_place = out.defined() && out.data() == in.data();
  Tensor hin, hout;
  Status staged = stage_to_host(in, hin);
  if (staged && !in_place) staged = stage_to_host(out, hout);
  if (!staged) return fail_op(*s, rec, std::move(req), staged);
  // Not through the arena again: a GPU op that met there already holds its sequence number.
  if (auto e = rec.entered ? ordinary(*s, rec, std::move(req), hin, in_place ? hin : hout)
                           : collective(s, std::move(req), hin, in_place ? hin : hout);
      !e)
    return e;
  if (!out.defined()) return Status::ok();
  return in_place ? stage_back(hin, in) : stage_back(hout, out);
}

// By-data ops move GPU data through host memory; receivers get host tensors.
Result<Tensor> staged_by_data(PeerState& s, OpKind kind, const Tensor& data) {
  Tensor host;
  if (auto e = stage_to_host(data, host); !e) {
    // Take this peer's place in the op's first step: across nodes the descriptor all-gather.
    OpRequestData req = make_op(s.global ? OpKind::all_gather : kind);
    req.root_from_data = !s.global;
    return fail_op(s, req, e);
  }
  auto r = by_data(&s, kind, host);
  if (r && kind == OpKind::broadcast) return data;  // the source keeps its own tensor
  return r;
}

Status send_to_node(PeerState& s, const Tensor& t, PeerId dst, uint64_t tag) {
  const PeerId me = s.offset + s.id;
  if (s.finished) return already_finished(me);
  const OpRequestData req = make_p2p(OpKind::send, dst, tag);
  OpRecord rec;
  record_begin(s, rec, req, t);
  // Where this side cannot take part (its stream's earlier work not done), the receiver is told
  // why instead of getting the buffer.
  const Status why = start_failure();
  Tensor host;
  Status staged = why ? stage_to_host(t, host) : why;
  record_matched(s, rec, RunStrategy::of(RunStrategy::Path::p2p));
  Status sent = s.global->send({s.group, me, s.members[dst], tag}, staged ? host : t, deadline_of(s), staged);
  return record_end(s, rec, why ? sent : why);
}

Status recv_from_node(PeerState& s, Tensor& t, PeerId src, uint64_t tag, PostedOp* posted) {
  const PeerId me = s.offset + s.id;
  if (s.finished) return already_finished(me);
  const P2PMailbox::Key k{s.group, s.members[src], me, tag};
  const uint64_t ticket = posted ? posted->ticket() : 0;
  const OpRequestData req = make_p2p(OpKind::recv, src, tag);
  OpRecord rec;
  record_begin(s, rec, req, t);
  record_matched(s, rec, RunStrategy::of(RunStrategy::Path::p2p));
  if (Status why = start_failure(); !why) {  // the message is taken (the tag's order holds), not kept
    Tensor drop = Tensor::zeros(t.dtype(), t.shape());
    (void)s.global->recv(k, drop, deadline_of(s), ticket);
    return record_end(s, rec, why);
  }
  if (!t.is_cuda()) return record_end(s, rec, s.global->recv(k, t, deadline_of(s), ticket));
  Tensor host = Tensor::zeros(t.dtype(), t.shape());
  if (auto e = s.global->recv(k, host, deadline_of(s), ticket); !e) return record_end(s, rec, e);
  return record_end(s, rec, stage_back(host, t));
}

} // namespace chorus::peer_impl
