// GlobalClient::send and recv with a peer of another node: a message's header and data as frames,
// the receiver's answer, the pull of data that waits at the sender, a send's withdrawal.
#include <cstring>
#include <optional>

#include "actors/global_client/global_client.hpp"
#include "actors/global_client/p2p.hpp"
#include "messages/data_codec.hpp"
#include "strategies/planner.hpp"

namespace chorus {

namespace {

// How long a send that timed out waits for the receiver's node to answer its withdrawal.
constexpr std::chrono::seconds kWithdrawWait{5};
// How long a receive that gives up waits for data being written into its tensor to stop.
constexpr std::chrono::seconds kWriteGrace{5};

// A frame (GlobalClient::frame_header's) of the pair k: its handle's group, and source and
// destination in `seq`.
FrameHeader pair_frame(FrameHeader h, const P2PMailbox::Key& k) {
  h.group = k.group;
  h.seq = (uint64_t{k.source} << 32) | k.destination;
  return h;
}

std::string pair_label(const P2PMailbox::Key& k) {
  return "send/recv " + std::to_string(k.source) + "->" + std::to_string(k.destination) + " tag " +
         std::to_string(k.tag) + (k.group ? " of group " + std::to_string(k.group) : "");
}
} // namespace

Status GlobalClient::send(const P2PMailbox::Key& k, const Tensor& t, Clock::time_point deadline, const Status& failed) {
  const auto [group, src, dst, tag] = k;
  const uint32_t node = node_of(dst);
  const std::string label = pair_label(k);
  if (auto l = lost(); !l.is_ok()) return l;
  // A sender that cannot send still sends the header, saying why, so the receiver fails with it
  // at once; both sides report the same error.
  const bool sends_data = failed.is_ok();
  // Its text is cut to what a header holds (P2PWindow::kHeaderBytes).
  const Status cannot = sends_data ? Status::ok()
                                   : Status(failed.code(), (label + ": peer " + std::to_string(src) +
                                                            " could not send its tensor: " + failed.message())
                                                               .substr(0, P2PWindow::kHeaderBytes / 2));
  const uint64_t bytes = sends_data ? t.nbytes() : 0;
  // Room in the receiving node's windows: the data goes with the header where the planner lets it
  // and it fits (eager), else when the receive that takes the header pulls it.
  bool eager = plan_p2p_eager(bytes);
  Status why;
  switch (p2p_->reserve(node, bytes, poller_, deadline, eager, why)) {
    case P2PMailbox::Took::it: break;
    case P2PMailbox::Took::ended: return why;
    default:
      return Status(Errc::timeout, label + ": node " + std::to_string(node) + " held " +
                                       std::to_string(p2p_->window().messages) +
                                       " messages of this node's that no receive took, for the whole send's timeout");
  }
  const uint64_t id = ++p2p_ids_;
  bool keep_room = false;  // a send that gave up on its answer leaves its room to the answer
  Status ended_by;         // what ended the send where not its own timeout (a lost node)
  struct Done {
    std::function<void()> f;
    ~Done() { f(); }
  } done{[&] {
    // A pull that came as it gave up: the receive is told why it gave up.
    if (!eager && p2p_->forget_pull(k, id)) refuse_pull(k, id, ended_by.is_ok() ? gave_up_in_time(k) : ended_by);
    p2p_->returned(k, id);
    if (!keep_room) p2p_->unreserve(node, bytes, eager);
  }};
  p2p_->sent(k, id);
  if (!eager) p2p_->awaits_pull(k, id);
  // The data's own frame (p2p_body), named by the message's number: the receiving node puts it
  // where it belongs (a buffer of its own; the receive's tensor once pulled) before reading it.
  FrameHeader body = frame_header(FrameType::p2p_body);
  body.group = group;
  body.seq = id;
  body.bytes = bytes;
  const auto* data = static_cast<const std::byte*>(t.data());
  P2PHeaderData head{src, dst, tag, t.dtype(), t.numel(), cannot, id};
  head.pulled = !eager;
  {
    // The header, and eager data right after it in the same write.
    FrameHeader h = pair_frame(frame_header(FrameType::p2p_data), k);
    std::string header = encode_p2p_header(head);
    h.slot = static_cast<uint32_t>(header.size());
    h.bytes = header.size();
    auto ticket = sends_data && eager && bytes > 0 ? SendTicket::after(whole_frame(h, header), body, data)
                                                   : SendTicket::owning(h, std::move(header));
    await_sent(*conns_[node]->send(std::move(ticket)), node, deadline);
  }
  const Status timed_out(Errc::timeout, label + ": peer " + std::to_string(dst) + " (node " + std::to_string(node) +
                                            ") never posted the matching recv within the send's timeout");
  Status answer;
  bool withdrawing = false;
  // What the send returns for its answer: once it withdrew its message, an answer of timeout is
  // the withdrawal's (no receive has it); a sender that could not send keeps its own error.
  auto outcome = [&](const Status& a) {
    return !sends_data ? cannot : withdrawing && a.code() == Errc::timeout ? timed_out : a;
  };
  const std::function<bool()> pulled = [&] { return !eager && p2p_->pulled(k, id); };
  for (;;) {
    switch (p2p_->take_answer(k, id, node, poller_, deadline, answer, why, &pulled)) {
      case P2PMailbox::Took::it: return outcome(answer);
      case P2PMailbox::Took::ended: return ended_by = why;
      case P2PMailbox::Took::nothing: break;
      case P2PMailbox::Took::stopped:  // the receive that took the header wants the data: it gets the
        // time a transfer has (the Config's timeout), however little of the send's own is left
        await_sent(*conns_[node]->send(SendTicket::of(body, data)), node, std::max(deadline, Clock::now() + config_.timeout));
        continue;
    }
    if (withdrawing) {  // the receiver's node did not answer the withdrawal in time either
      if (auto late = p2p_->abandon(k, id, node, bytes, eager)) return outcome(*late);
      keep_room = true;
      return Status(Errc::timeout, timed_out.message() + "; node " + std::to_string(node) +
                                       " did not answer its withdrawal either, so a receive there may still take it");
    }
    // The message may wait in the receiver's mailbox: take it back, so that no later receive
    // takes it for a later send's. Its node answers once: the withdrawal, or a receive's answer
    // where one took it first.
    conns_[node]->send(SendTicket::owning(pair_frame(frame_header(FrameType::p2p_cancel), k), encode_p2p_ack({src, dst, tag, timed_out, id})));
    withdrawing = true;
    deadline = Clock::now() + std::min<Clock::duration>(config_.timeout, kWithdrawWait);
  }
}

Status GlobalClient::recv(const P2PMailbox::Key& k, Tensor& t, Clock::time_point deadline, uint64_t ticket) {
  const uint32_t src = k.source, node = node_of(src);
  const std::string label = pair_label(k);
  P2PMailbox::Message m;
  Status why;
  // Eager data that comes while it waits lands straight in its tensor (p2p_landing.cpp), for which
  // it needs a place among the posted receives: one of its own where it was not posted at its call.
  std::optional<P2PMailbox::Posted> own;
  if (!ticket) ticket = own.emplace(*p2p_, k).ticket();
  const P2PMailbox::Landing landing{static_cast<std::byte*>(t.data()), t.dtype(), t.numel(), t.nbytes()};
  const bool lands = !t.is_cuda() && t.nbytes() > 0;
  auto took = p2p_->take_message(k, node, poller_, deadline, m, why, ticket, lands ? &landing : nullptr);
  if (lands && took != P2PMailbox::Took::it && settle_landing(node, ticket, m)) took = P2PMailbox::Took::it;
  switch (took) {
    case P2PMailbox::Took::it: break;
    case P2PMailbox::Took::ended: return why;
    case P2PMailbox::Took::nothing:
      return {Errc::timeout, label + ": peer " + std::to_string(src) + " (node " + std::to_string(node) +
                                 ") never posted the matching send within " + std::to_string(config_.timeout.count()) + " ms"};
    case P2PMailbox::Took::stopped: return {Errc::internal, label + ": the wait for the message stopped"};  // take_any's only
  }
  return take_delivered(k, m, t, deadline);
}

bool GlobalClient::settle_landing(uint32_t node, uint64_t ticket, P2PMailbox::Message& m) {
  // The receive gives up (or its node's link ended): data that landed in its tensor meanwhile is
  // its message after all; data still being written there must stop before the tensor goes back
  // to the caller (a frame that does not end within the grace has its link cut, as in pull()).
  std::shared_ptr<WaitWord> writing;
  if (p2p_->settle_landing(ticket, m, writing) == P2PMailbox::Took::it) return true;
  if (!writing) return false;
  if (!poller_.wait(*writing, 1, Clock::now() + kWriteGrace, false)) {
    cut_off(node, "node " + std::to_string(node) + " stalled in the middle of a message's data");
    (void)poller_.wait(*writing, 1, Clock::now() + kWriteGrace, false);
  }
  return p2p_->settle_landing(ticket, m, writing) == P2PMailbox::Took::it;
}

Status GlobalClient::gave_up_in_time(const P2PMailbox::Key& k) const {
  return Status(Errc::timeout, pair_label(k) + ": peer " + std::to_string(k.source) +
                                   " gave up on its send (its timeout ran out) before the receive pulled the data");
}

void GlobalClient::refuse_pull(const P2PMailbox::Key& k, uint64_t id, const Status& cause) {
  FrameHeader h = pair_frame(frame_header(FrameType::p2p_pulled), k);
  // Cut to what a header holds, as a sender's failure is (send()).
  const Status why(cause.code(), cause.message().substr(0, P2PWindow::kHeaderBytes / 2));
  std::string head = encode_p2p_ack({k.source, k.destination, k.tag, why, id});
  h.slot = static_cast<uint32_t>(head.size());
  conns_[node_of(k.destination)]->send(SendTicket::owning(h, std::move(head)));
}

void GlobalClient::answer_withdrawn(const P2PMailbox::Key& k, uint64_t id) {
  conns_[node_of(k.source)]->send(SendTicket::owning(
      pair_frame(frame_header(FrameType::p2p_ack), k), encode_p2p_ack({k.source, k.destination, k.tag, Status(Errc::timeout, "withdrawn before a receive took it"), id})));
}

Status GlobalClient::take_delivered(const P2PMailbox::Key& k, const P2PMailbox::Message& m, Tensor& t,
                                    Clock::time_point deadline) {
  const auto [group, src, dst, tag] = k;
  const uint32_t node = node_of(src);
  const std::string label = pair_label(k);
  Status s;
  const std::string theirs = std::string(to_string(m.dtype)) + "[" + std::to_string(m.numel) + "]";
  const std::string mine = std::string(to_string(t.dtype())) + "[" + std::to_string(t.numel()) + "]";
  if (!m.failed.is_ok())
    s = m.failed;
  else if (m.dtype != t.dtype())
    s = Status(Errc::dtype_mismatch, label + ": sender has " + theirs + ", receiver " + mine);
  else if (m.numel != t.numel() || (!m.pulled && m.size != t.nbytes()))
    s = Status(Errc::shape_mismatch, label + ": sender has " + theirs + ", receiver " + mine);
  else if (m.pulled)
    s = pull(k, m.id, t, deadline);
  else if (m.size > 0 && m.data.get() != t.data())  // else it landed there (p2p_landing.cpp)
    std::memcpy(t.data(), m.data.get(), t.nbytes());
  conns_[node]->send(SendTicket::owning(pair_frame(frame_header(FrameType::p2p_ack), k), encode_p2p_ack({src, dst, tag, s, m.id})));
  return s;
}

Status GlobalClient::pull(const P2PMailbox::Key& k, uint64_t id, Tensor& t, Clock::time_point deadline) {
  const uint32_t node = node_of(k.source);
  if (!p2p_->expect_pull(k, id, node, static_cast<std::byte*>(t.data()), t.nbytes())) {
    const std::string why = "node " + std::to_string(node) + " numbered two of its messages " + std::to_string(id);
    on_node_lost(node, why);
    return Status(Errc::node_lost, pair_label(k) + ": " + why);
  }
  conns_[node]->send(SendTicket::owning(pair_frame(frame_header(FrameType::p2p_pull), k),
                                        encode_p2p_ack({k.source, k.destination, k.tag, Status::ok(), id})));
  Status status, why;
  // The transfer has the time any has (the Config's timeout), however little of the receive's is left.
  const auto took = p2p_->take_pulled(k, id, node, poller_, std::max(deadline, Clock::now() + config_.timeout), status, why);
  if (took == P2PMailbox::Took::it) return status;
  if (took != P2PMailbox::Took::ended)
    why = Status(Errc::timeout, pair_label(k) + ": peer " + std::to_string(k.source) + " (node " + std::to_string(node) +
                                    ") did not send the data of its message, which this receive pulled, within the receive's timeout");
  // Data on its way into t must stop before t goes back to the caller: a transfer that did not end
  // within a whole timeout of its own has its link cut (as the sender's await_sent would); one
  // that a loss elsewhere interrupts may end first.
  if (auto writing = p2p_->give_up_pull(k, id, node)) {
    if (took == P2PMailbox::Took::ended && poller_.wait(*writing, 1, Clock::now() + kWriteGrace, false)) return why;
    cut_off(node, "node " + std::to_string(node) + " stalled in the middle of a transfer");
    (void)poller_.wait(*writing, 1, Clock::now() + kWriteGrace, false);
  }
  return why;
}

} // namespace chorus
