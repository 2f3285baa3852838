#include "actors/global_client/p2p.hpp"

#include <algorithm>
#include <type_traits>
#include <cstring>

#include "actors/global_client/global_client.hpp"
#include "core/op_kinds.hpp"
#include "messages/data_codec.hpp"

namespace chorus {

namespace {

// How long a send that timed out waits for the receiver's node to answer its withdrawal.
constexpr std::chrono::seconds kWithdrawWait{5};

// A frame (GlobalClient::frame_header's) of the pair k: its handle's group, and source and
// destination in `seq`.
FrameHeader pair_frame(FrameHeader h, const P2PMailbox::Key& k) {
  h.group = k.group;
  h.seq = (uint64_t{k.source} << 32) | k.destination;
  return h;
}

// The entry of a queue (messages or answers) that is message `id`'s.
template <class Queue>
auto with_id(Queue& q, uint64_t id) {
  return std::find_if(q.begin(), q.end(), [id](const auto& x) { return x.id == id; });
}

std::string pair_label(const P2PMailbox::Key& k) {
  return "send/recv " + std::to_string(k.source) + "->" + std::to_string(k.destination) + " tag " +
         std::to_string(k.tag) + (k.group ? " of group " + std::to_string(k.group) : "");
}
} // namespace

// ---- The mailbox ----

void P2PMailbox::bump() {
  const uint32_t v = word_.value.load();
  if (v != kWordTop) word_.set(v + 1);
}

void P2PMailbox::deliver(const Key& k, Message m) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    m.order = ++delivered_;
    inbox_[k].push_back(std::move(m));
  }
  bump();
}

void P2PMailbox::answer(const Key& k, uint64_t id, Status s) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (abandoned_.erase({k, id})) return;  // its send gave up waiting for it
    answers_[k].push_back({id, std::move(s)});
  }
  bump();
}

std::optional<Status> P2PMailbox::abandon(const Key& k, uint64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  if (auto it = answers_.find(k); it != answers_.end()) {
    auto& q = it->second;
    if (auto a = with_id(q, id); a != q.end()) {  // it came after all
      Status s = std::move(a->status);
      q.erase(a);
      if (q.empty()) answers_.erase(it);
      return s;
    }
  }
  abandoned_.insert({k, id});
  return std::nullopt;
}

bool P2PMailbox::withdraw(const Key& k, uint64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  if (lent_.count({k, id})) {  // decided when the receive keeps it or puts it back
    withdrawn_lent_.insert({k, id});
    return false;
  }
  auto it = inbox_.find(k);
  if (it == inbox_.end()) return false;
  auto m = with_id(it->second, id);
  if (m == it->second.end()) return false;
  it->second.erase(m);
  if (it->second.empty()) inbox_.erase(it);
  return true;
}

void P2PMailbox::node_lost(const Status& why) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!lost_) lost_ = why;
  }
  word_.set(kWordTop);
}

void P2PMailbox::node_left(uint32_t node, const Status& why) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    gone_.emplace(node, why);
  }
  bump();
}

uint64_t P2PMailbox::post(const Key& k) {
  std::lock_guard<std::mutex> lk(mu_);
  posted_.emplace(++tickets_, k);
  return tickets_;
}

void P2PMailbox::unpost(uint64_t ticket) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    posted_.erase(ticket);
  }
  bump();  // a receive posted later may now take what this one might have
}

bool P2PMailbox::left_to_earlier(const Key& k, uint64_t ticket) const {
  for (auto it = posted_.begin(); it != posted_.end() && it->first < ticket; ++it) {
    const Key& p = it->second;
    if (p.group == k.group && p.destination == k.destination && p.tag == k.tag &&
        (p.source == k.source || p.source == kAnySource))
      return true;
  }
  return false;
}

template <class T, class Pick>
P2PMailbox::Took P2PMailbox::take_first(std::map<Key, std::deque<T>>& box, Pick pick, std::span<const uint32_t> nodes,
                                        Poller& poller, Clock::time_point deadline, const std::function<bool()>* stop,
                                        Key* k, T& out, Status& why, bool loan) {
  for (;;) {
    const uint32_t g = word_.value.load();
    if (stop && (*stop)()) return Took::stopped;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (auto it = pick(); it != box.end()) {
        if (k) *k = it->first;
        if constexpr (std::is_same_v<T, Message>)
          if (loan) lent_.insert({it->first, it->second.front().id});
        out = std::move(it->second.front());
        it->second.pop_front();
        if (it->second.empty()) box.erase(it);
        return Took::it;
      }
      if (lost_) {
        why = *lost_;
        return Took::ended;
      }
      // Every sender's node left in order: none of them will send.
      bool all_gone = true;
      for (uint32_t node : nodes) {
        auto gone = gone_.find(node);
        if (gone == gone_.end()) {
          all_gone = false;
          break;
        }
        why = gone->second;
      }
      if (all_gone) return Took::ended;
    }
    if (!poller.wait(word_, g + 1, deadline)) return Took::nothing;
  }
}

template <class T>
P2PMailbox::Took P2PMailbox::take(std::map<Key, std::deque<T>>& box, const Key& k, uint32_t node, Poller& poller,
                                  Clock::time_point deadline, T& out, Status& why, uint64_t ticket) {
  auto pick = [&] {
    auto it = box.find(k);
    return it != box.end() && !it->second.empty() && !left_to_earlier(k, ticket) ? it : box.end();
  };
  return take_first(box, pick, std::span<const uint32_t>(&node, 1), poller, deadline, nullptr, nullptr, out, why);
}

P2PMailbox::Took P2PMailbox::take_message(const Key& k, uint32_t node, Poller& poller, Clock::time_point deadline,
                                          Message& out, Status& why, uint64_t ticket) {
  return take(inbox_, k, node, poller, deadline, out, why, ticket);
}

P2PMailbox::Took P2PMailbox::take_answer(const Key& k, uint64_t id, uint32_t node, Poller& poller,
                                         Clock::time_point deadline, Status& out, Status& why) {
  auto pick = [&] {  // under mu_: this message's answer, put first (sends of k may run at once)
    auto it = answers_.find(k);
    if (it == answers_.end()) return it;
    auto& q = it->second;
    auto a = with_id(q, id);
    if (a == q.end()) return answers_.end();
    std::rotate(q.begin(), a, a + 1);
    return it;
  };
  Answer a;
  const Took took = take_first(answers_, pick, std::span<const uint32_t>(&node, 1), poller, deadline, nullptr, nullptr, a, why);
  if (took == Took::it) out = std::move(a.status);
  return took;
}

P2PMailbox::Took P2PMailbox::take_any(uint32_t group, uint32_t dst, uint64_t tag, const std::vector<uint32_t>& from,
                                      const std::vector<uint32_t>& from_nodes, Poller& poller,
                                      Clock::time_point deadline, const std::function<bool()>& stop, Key& k,
                                      Message& out, Status& why, uint64_t ticket) {
  auto first = [&] {  // the message of `from` that arrived first, and is not an earlier receive's
    auto at = inbox_.end();
    for (uint32_t src : from) {
      const Key key{group, src, dst, tag};
      auto it = inbox_.find(key);
      if (it != inbox_.end() && !it->second.empty() && !left_to_earlier(key, ticket) &&
          (at == inbox_.end() || it->second.front().order < at->second.front().order))
        at = it;
    }
    return at;
  };
  return take_first(inbox_, first, from_nodes, poller, deadline, &stop, &k, out, why, true);
}

void P2PMailbox::keep(const Key& k, uint64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  lent_.erase({k, id});
  withdrawn_lent_.erase({k, id});  // the receive took it first: its answer is the send's
}

bool P2PMailbox::put_back(const Key& k, Message m) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    lent_.erase({k, m.id});
    if (withdrawn_lent_.erase({k, m.id})) return true;
    inbox_[k].push_front(std::move(m));
  }
  bump();
  return false;
}

// ---- GlobalClient::send and recv ----

Status GlobalClient::send(const P2PMailbox::Key& k, const Tensor& t, Clock::time_point deadline, const Status& failed) {
  const auto [group, src, dst, tag] = k;
  const uint32_t node = node_of(dst);
  const std::string label = pair_label(k);
  if (auto l = lost(); !l.is_ok()) return l;
  // A sender that cannot send still sends the header, saying why, so the receiver fails with it
  // at once; both sides report the same error.
  const bool sends_data = failed.is_ok();
  const Status cannot = sends_data ? Status::ok()
                                   : Status(failed.code(), label + ": peer " + std::to_string(src) +
                                                               " could not send its tensor: " + failed.message());
  // One frame: the header (its length in `slot`) and the data, so that concurrent senders on this
  // connection never split a header from its data.
  FrameHeader h = pair_frame(frame_header(FrameType::p2p_data), k);
  const uint64_t id = ++p2p_ids_;
  std::string head = encode_p2p_header({src, dst, tag, t.dtype(), t.numel(), cannot, id});
  h.slot = static_cast<uint32_t>(head.size());
  auto ticket = conns_[node]->send(SendTicket::prefixed(h, std::move(head),
                                                        sends_data ? static_cast<const std::byte*>(t.data()) : nullptr,
                                                        sends_data ? t.nbytes() : 0));
  await_sent(*ticket, node, deadline);
  const Status timed_out(Errc::timeout, label + ": peer " + std::to_string(dst) + " (node " + std::to_string(node) +
                                            ") never posted the matching recv within the send's timeout");
  Status answer, why;
  bool withdrawing = false;
  // What the send returns for its answer: once it withdrew its message, an answer of timeout is
  // the withdrawal's (no receive has it); a sender that could not send keeps its own error.
  auto outcome = [&](const Status& a) {
    return !sends_data ? cannot : withdrawing && a.code() == Errc::timeout ? timed_out : a;
  };
  for (;;) {
    switch (p2p_->take_answer(k, id, node, poller_, deadline, answer, why)) {
      case P2PMailbox::Took::it: return outcome(answer);
      case P2PMailbox::Took::ended: return why;
      case P2PMailbox::Took::nothing: break;
      case P2PMailbox::Took::stopped: return {Errc::internal, label + ": the wait for the answer stopped"};  // take_any's only
    }
    if (withdrawing) {  // the receiver's node did not answer the withdrawal in time either
      if (auto late = p2p_->abandon(k, id)) return outcome(*late);
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
  switch (p2p_->take_message(k, node, poller_, deadline, m, why, ticket)) {
    case P2PMailbox::Took::it: break;
    case P2PMailbox::Took::ended: return why;
    case P2PMailbox::Took::nothing:
      return {Errc::timeout, label + ": peer " + std::to_string(src) + " (node " + std::to_string(node) +
                                 ") never posted the matching send within " + std::to_string(config_.timeout.count()) + " ms"};
    case P2PMailbox::Took::stopped: return {Errc::internal, label + ": the wait for the message stopped"};  // take_any's only
  }
  return take_delivered(k, m, t);
}

void GlobalClient::answer_withdrawn(const P2PMailbox::Key& k, uint64_t id) {
  conns_[node_of(k.source)]->send(SendTicket::owning(
      pair_frame(frame_header(FrameType::p2p_ack), k), encode_p2p_ack({k.source, k.destination, k.tag, Status(Errc::timeout, "withdrawn before a receive took it"), id})));
}

Status GlobalClient::take_delivered(const P2PMailbox::Key& k, const P2PMailbox::Message& m, Tensor& t) {
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
  else if (m.numel != t.numel() || m.bytes.size() - m.offset != t.nbytes())
    s = Status(Errc::shape_mismatch, label + ": sender has " + theirs + ", receiver " + mine);
  else
    std::memcpy(t.data(), m.bytes.data() + m.offset, t.nbytes());
  conns_[node]->send(SendTicket::owning(pair_frame(frame_header(FrameType::p2p_ack), k), encode_p2p_ack({src, dst, tag, s, m.id})));
  return s;
}

} // namespace chorus
