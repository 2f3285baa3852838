// GlobalClient as the FrameSink of every data connection: where each arriving frame goes (called by
// whoever leads the poller, one frame of a connection at a time). Data frames go to their op's
// NetOp (straight into its buffer, piece by piece); announcements to their op; point-to-point
// messages, their data and answers to the P2PMailbox; the host arena's offer and answers to share_arena; a
// connection's end to every op and the mailbox.
#include "actors/global_client/global_client.hpp"

#include "actors/global_client/net_op.hpp"
#include "actors/global_client/p2p.hpp"
#include "messages/data_codec.hpp"

namespace chorus {

namespace {
constexpr std::size_t kMaxControl = std::size_t{1} << 20;  // a larger control payload is garbled
// Eager data from this size lands in a pooled buffer: a fresh allocation of many megabytes costs
// more in page faults than its copy (below it, malloc reuses its heap).
constexpr std::size_t kPooledData = std::size_t{1} << 20;
} // namespace

void GlobalClient::refuse(uint32_t node, const std::string& why) {
  Reading& r = reading_[node];
  r.refused = true;
  r.parked.reset();
  on_node_lost(node, "node " + std::to_string(node) + " " + why);
}

std::byte* GlobalClient::begin_frame(uint32_t node, const FrameHeader& h) {
  Reading& r = reading_[node];
  if (r.refused) return nullptr;
  // What a node leaves here is bounded (P2PWindow), checked before a frame's bytes are kept; a
  // node that breaks the bounds has every later frame dropped.
  auto refused = [&](const std::string& why) -> std::byte* {
    refuse(node, why);
    return nullptr;
  };
  // An eager message's data is the frame right after its header (they leave in one write).
  if (r.parked && (h.type != FrameType::p2p_body || h.seq != r.parked->second.id))
    return refused("sent another frame where the data of message " + std::to_string(r.parked->second.id) + " belongs");
  switch (h.type) {
    case FrameType::data: {
      r.op = op_for(h.group, h.seq, true);
      r.slot = h.slot;
      return r.op ? r.op->incoming_frame(node, h) : nullptr;
    }
    case FrameType::p2p_data:
    case FrameType::p2p_pulled: {  // headers alone: a message's data comes in a frame of its own
      std::string why;
      if (h.bytes > P2PWindow::kHeaderBytes)
        why = std::string("sent a ") + (h.type == FrameType::p2p_data ? "send" : "pull's answer") + " header of " +
              std::to_string(h.bytes) + " bytes, over the " + std::to_string(P2PWindow::kHeaderBytes) + " a header may take";
      else if (h.slot != h.bytes)
        why = "sent a point-to-point header frame with data in it";
      else if (h.type == FrameType::p2p_data)
        (void)p2p_->admit(node, 0, why);
      if (!why.empty()) return refused(why);
      r.bytes.resize(h.bytes);
      return reinterpret_cast<std::byte*>(r.bytes.data());
    }
    case FrameType::p2p_body: {
      std::string why;
      if (!r.parked) {  // pulled: straight into the tensor of the receive that pulled it
        std::byte* at = p2p_->body(node, h.seq, h.bytes, why);
        return why.empty() ? at : refused(why);  // nullptr: its receive gave up; read and dropped
      }
      // The data of the message whose header came just before, within the window.
      if (!p2p_->admit(node, h.bytes, why)) return refused(why);
      P2PMailbox::Message& m = r.parked->second;
      if (uint64_t want = 0; __builtin_mul_overflow(m.numel, dtype_size(m.dtype), &want) || want != h.bytes)
        return refused("sent " + std::to_string(h.bytes) + " bytes of data for message " + std::to_string(m.id) +
                       ", whose header says " + std::string(to_string(m.dtype)) + "[" + std::to_string(m.numel) + "]");
      m.size = h.bytes;
      if (std::byte* at = p2p_->land(r.parked->first, m)) return at;  // its receive waits: into its tensor
      if (h.bytes >= kPooledData) {
        m.data = pool_.take(h.bytes);
      } else {
        auto heap = std::make_shared_for_overwrite<std::byte[]>(h.bytes);
        m.data = std::shared_ptr<std::byte>(heap, heap.get());
      }
      return m.data.get();
    }
    case FrameType::announce:
    case FrameType::p2p_ack:
    case FrameType::p2p_cancel:
    case FrameType::p2p_pull:
    case FrameType::gave_up:
    case FrameType::stragglers:
    case FrameType::leaving:
    case FrameType::arena_offer:
    case FrameType::arena_answer:
      if (h.bytes > kMaxControl) return nullptr;
      r.bytes.resize(h.bytes);
      return reinterpret_cast<std::byte*>(r.bytes.data());
    default: return nullptr;
  }
}

void GlobalClient::progress(uint32_t node, const FrameHeader& h, std::size_t got) {
  Reading& r = reading_[node];
  if (h.type == FrameType::data) {
    if (r.op) r.op->incoming_progress(r.slot, got);
    return;
  }
  if (got < h.bytes) return;
  if (h.type == FrameType::p2p_body && r.parked) {  // the eager message is whole
    auto [k, m] = std::move(*r.parked);
    r.parked.reset();
    return p2p_->deliver(k, std::move(m));
  }
  if (h.type == FrameType::p2p_body) return p2p_->body_done(node, h.seq);
  const std::string from = "node " + std::to_string(node);
  std::string error;
  switch (h.type) {
    case FrameType::announce: {
      // Its own announcement, or another node's that it forwards.
      auto a = decode_announcement(r.bytes.data(), r.bytes.size(), error);
      if (!a || a->node >= topo_.num_nodes || a->node == topo_.node_id)
        return on_node_lost(node, from + " sent a garbled announcement" +
                                      (a ? " (naming node " + std::to_string(a->node) + ")" : ": " + error));
      if (auto op = op_for(h.group, h.seq, true)) op->announced(*a, h, r.bytes);
      return;
    }
    case FrameType::stragglers: {
      auto ranks = decode_stragglers(r.bytes.data(), r.bytes.size(), error);
      if (!ranks) return on_node_lost(node, from + " sent a garbled straggler note: " + error);
      if (auto op = op_for(h.group, h.seq, true)) op->stragglers(node, std::move(*ranks));
      return;
    }
    case FrameType::gave_up: {
      // The op timed out there: it fails here too, with the same error, unless it ended here.
      auto why = decode_leaving(r.bytes.data(), r.bytes.size(), error);
      if (!why || why->code() != Errc::timeout) return on_node_lost(node, from + " sent a garbled note of an op it gave up on");
      auto op = op_for(h.group, h.seq, true);
      if (!op) return;
      op->gave_up(*why, node, h.slot == kNeverLaunched);
      if (h.slot != kNeverLaunched || op->launched()) return;
      // This node's peers that called it stop waiting for the others here too (the local server).
      NeverLaunchedListener tell;
      {
        std::lock_guard<std::mutex> lk(mu_);
        tell = never_listener_;
      }
      if (tell && tell(h.group, h.seq, *why)) finished(h.group, h.seq);
      return;
    }
    case FrameType::leaving: {
      auto why = decode_leaving(r.bytes.data(), r.bytes.size(), error);
      if (!why) return on_node_lost(node, from + " sent a garbled leaving note: " + error);
      std::lock_guard<std::mutex> lk(mu_);
      leaving_[node] = Failure{h.group, h.seq, std::move(*why)};
      return;
    }
    case FrameType::p2p_data: {
      auto head = decode_p2p_header(r.bytes.data(), r.bytes.size(), error);
      if (!head) return on_node_lost(node, from + " sent a garbled send header");
      // A node speaks for its own peers only, to this node's.
      if (!pair_between(head->source, node, head->destination, topo_.node_id))
        return on_node_lost(node, from + " sent a message from peer " + std::to_string(head->source) + " to peer " +
                                      std::to_string(head->destination) + ", not from its peers to this node's");
      const P2PMailbox::Key k{h.group, head->source, head->destination, head->tag};
      P2PMailbox::Message m{0, head->dtype, head->numel, nullptr, 0, head->failed, head->id, node, head->pulled};
      if (head->pulled && (head->numel == 0 || !head->failed.is_ok()))
        error = "sent a message whose data waits, with none to send";
      else if (!head->data_follows())
        return p2p_->deliver(k, std::move(m));
      else
        return void(r.parked.emplace(k, std::move(m)));  // it waits for its data, the next frame
      return refuse(node, error);
    }
    case FrameType::arena_offer:
    case FrameType::arena_answer: return arena_frame(node, h, r.bytes);
    case FrameType::p2p_ack: {
      auto ack = decode_p2p_ack(r.bytes.data(), r.bytes.size(), error);
      if (!ack) return on_node_lost(node, from + " sent a garbled send answer");
      if (!pair_between(ack->source, topo_.node_id, ack->destination, node))
        return on_node_lost(node, from + " answered a send from peer " + std::to_string(ack->source) + " to peer " +
                                      std::to_string(ack->destination) + ", not one from this node's peers to its own");
      p2p_->answer({h.group, ack->source, ack->destination, ack->tag}, ack->id, std::move(ack->status));
      return;
    }
    case FrameType::p2p_pull: {
      // A receive there took the header of one of our sends, whose data waits: the send sends it.
      auto p = decode_p2p_ack(r.bytes.data(), r.bytes.size(), error);
      if (!p) return on_node_lost(node, from + " sent a garbled pull");
      if (!pair_between(p->source, topo_.node_id, p->destination, node))
        return on_node_lost(node, from + " pulled a message from peer " + std::to_string(p->source) + " to peer " +
                                      std::to_string(p->destination) + ", not one from this node's peers to its own");
      // One whose send gave up meanwhile (or never was) is told so, rather than waiting in vain: the
      // status that ended every op of the job where there is one (a lost node, a revoke: what
      // ended the send too, as likely as not), else the send's timeout.
      if (const P2PMailbox::Key k{h.group, p->source, p->destination, p->tag}; !p2p_->pull(k, p->id)) {
        const Status ended = lost();
        refuse_pull(k, p->id, ended.is_ok() ? gave_up_in_time(k) : ended);
      }
      return;
    }
    case FrameType::p2p_pulled: {  // a send that gave up before the pull came
      auto p = decode_p2p_ack(r.bytes.data(), r.bytes.size(), error);
      if (!p) return on_node_lost(node, from + " sent a garbled answer to a pull");
      if (p->status.is_ok())
        return refuse(node, "answered a pull of message " + std::to_string(p->id) + " with neither its data nor why not");
      if (!pair_between(p->source, node, p->destination, topo_.node_id) ||
          !p2p_->deliver_pulled({h.group, p->source, p->destination, p->tag}, p->id, node, std::move(p->status)))
        return refuse(node, "answered a pull of message " + std::to_string(p->id) + " from peer " +
                                std::to_string(p->source) + " to peer " + std::to_string(p->destination) +
                                ", which no receive here made");
      return;
    }
    case FrameType::p2p_cancel: {
      // A send of that node timed out: its message is withdrawn unless a receive took it, whose
      // answer is then the send's.
      auto c = decode_p2p_ack(r.bytes.data(), r.bytes.size(), error);
      if (!c) return on_node_lost(node, from + " sent a garbled withdrawal");
      if (!pair_between(c->source, node, c->destination, topo_.node_id))
        return on_node_lost(node, from + " withdrew a message from peer " + std::to_string(c->source) + " to peer " +
                                      std::to_string(c->destination) + ", not one from its peers to this node's");
      const P2PMailbox::Key k{h.group, c->source, c->destination, c->tag};
      if (p2p_->withdraw(k, c->id)) answer_withdrawn(k, c->id);
      return;
    }
    default: return;
  }
}

bool GlobalClient::pair_between(uint32_t src, uint32_t src_node, uint32_t dst, uint32_t dst_node) const {
  const uint32_t total = total_peers();
  return src < total && dst < total && node_of(src) == src_node && node_of(dst) == dst_node;
}

void GlobalClient::frame_failed(uint32_t node, const FrameHeader& h) {
  Reading& r = reading_[node];
  if (h.type == FrameType::data && r.op) r.op->incoming_failed(r.slot);
  if (h.type == FrameType::p2p_body && r.parked) {  // its message goes with it
    if (r.parked->second.landed_in) p2p_->land_failed(r.parked->second);
    r.parked.reset();
  }
  else if (h.type == FrameType::p2p_body) p2p_->body_failed(node, h.seq);
}

void GlobalClient::broken(uint32_t node, const std::string& why) { on_link_broken(node, why); }

void GlobalClient::closed(uint32_t node, bool orderly, const std::string& why) {
  // The other side's stream ended without a goodbye: its process exited or died (a link that
  // breaks resets or stalls, see broken()).
  if (!orderly) return on_node_lost(node, "node " + std::to_string(node) + " lost: " + why);
  // Everything the node sent before its goodbye has arrived: ops that got all they need from it
  // still complete; waits for more from it fail, and so does every later op. A node that left
  // because an op failed there said why: that op stops here at once with the same cause (the
  // straggler, the op; it cannot succeed without that node), and the later ones name it too.
  std::vector<std::shared_ptr<NetOp>> ops;
  std::shared_ptr<NetOp> failed;
  Status left(Errc::node_lost, "node " + std::to_string(node) + " left the collective");
  std::optional<Failure> note;
  {
    std::lock_guard<std::mutex> lk(mu_);
    note = node < leaving_.size() ? leaving_[node] : std::nullopt;
    if (note) left = Status(Errc::node_lost, left.message() + " after its op failed (" + note->why.to_string() + ")");
    left_.emplace_back(node, left);
    for (auto& [k, op] : ops_) {
      if (note && k == std::make_pair(note->group, note->seq)) failed = op;
      else ops.push_back(op);
    }
  }
  for (auto& op : ops) op->node_left(node, left);
  if (failed) {
    failed->node_left(node, note->why);
    failed->node_lost(note->why);  // this op only: it ends every wait in it
  }
  p2p_->node_left(node, left);
}

} // namespace chorus
