// The P2PMailbox (p2p.hpp): what other nodes' peers sent to ours, the answers to our sends, the
// windows that bound both, and the receiver's side of a pull.
#include "actors/global_client/p2p.hpp"

#include <algorithm>
#include <optional>
#include <type_traits>

#include "core/op_kinds.hpp"

namespace chorus {

namespace {

// The entry of a queue (messages or answers) that is message `id`'s.
template <class Queue>
auto with_id(Queue& q, uint64_t id) {
  return std::find_if(q.begin(), q.end(), [id](const auto& x) { return x.id == id; });
}

// The queue of k in `box` (answers, pulled data) with message `id`'s entry put first; box.end()
// where it has none (under the mailbox's lock).
template <class Box>
auto put_first(Box& box, const P2PMailbox::Key& k, uint64_t id) {
  auto it = box.find(k);
  if (it == box.end()) return it;
  auto& q = it->second;
  auto e = with_id(q, id);
  if (e == q.end()) return box.end();
  std::rotate(q.begin(), e, e + 1);
  return it;
}

// Takes message `id`'s entry out of k's queue in `box` (messages, answers, pulled data), dropping
// the queue once empty; nullopt where it has none (under the mailbox's lock).
template <class Box>
auto take_id(Box& box, const P2PMailbox::Key& k, uint64_t id) -> std::optional<typename Box::mapped_type::value_type> {
  auto it = box.find(k);
  if (it == box.end()) return std::nullopt;
  auto& q = it->second;
  auto e = with_id(q, id);
  if (e == q.end()) return std::nullopt;
  auto taken = std::move(*e);
  q.erase(e);
  if (q.empty()) box.erase(it);
  return taken;
}
} // namespace

// ---- The mailbox ----

void P2PMailbox::bump() { word_.advance(); }

bool P2PMailbox::admit(uint32_t node, uint64_t data_bytes, std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  const Held h = held_[node];
  if (h.messages + 1 > window_.messages) {
    why = "left more than " + std::to_string(window_.messages) + " messages here that no receive took";
    return false;
  }
  if (h.bytes + data_bytes > window_.bytes) {
    why = "sent " + std::to_string(h.bytes + data_bytes) + " bytes of data ahead of their receives, over the window of " +
          std::to_string(window_.bytes);
    return false;
  }
  return true;
}

void P2PMailbox::deliver(const Key& k, Message m) {
  std::shared_ptr<WaitWord> landed;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (m.landed_in) {  // its data is in its receive's tensor (p2p_landing.cpp)
      auto p = posted_.find(m.landed_in);
      if (p == posted_.end()) return;  // that receive returned (its link cut): nothing to take
      p->second.writing = false;
      landed = p->second.ended;
      ++landings_;
    }
    m.order = ++delivered_;
    Held& h = held_[m.node];
    ++h.messages;
    h.bytes += m.data_bytes();
    inbox_[k].push_back(std::move(m));
  }
  if (landed) landed->set(1);
  bump();
}

void P2PMailbox::release(uint32_t node, uint64_t data_bytes) {
  Held& h = held_[node];
  --h.messages;
  h.bytes -= data_bytes;
}

void P2PMailbox::answer(const Key& k, uint64_t id, Status s) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (auto a = abandoned_.find({k, id}); a != abandoned_.end()) {  // its send gave up waiting for it
      Held& o = out_[a->second.node];
      --o.messages;
      o.bytes -= a->second.bytes;
      abandoned_.erase(a);  // its room is free
    } else if (sending_.count({k, id})) {
      answers_[k].push_back({id, std::move(s)});
    } else {
      return;  // no send of ours waits for it
    }
  }
  bump();
}

void P2PMailbox::sent(const Key& k, uint64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  sending_.insert({k, id});
}

void P2PMailbox::returned(const Key& k, uint64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  sending_.erase({k, id});
  (void)take_id(answers_, k, id);  // an answer that came as it gave up
}

std::optional<Status> P2PMailbox::abandon(const Key& k, uint64_t id, uint32_t node, uint64_t bytes, bool eager) {
  std::lock_guard<std::mutex> lk(mu_);
  if (auto a = take_id(answers_, k, id)) return std::move(a->status);  // it came after all
  abandoned_.emplace(std::make_pair(k, id), Room{node, eager ? bytes : 0});
  sending_.erase({k, id});
  return std::nullopt;
}

bool P2PMailbox::withdraw(const Key& k, uint64_t id) {
  std::optional<Message> dropped;  // its buffer goes back to the pool after the lock
  std::lock_guard<std::mutex> lk(mu_);
  if (lent_.count({k, id})) {  // decided when the receive keeps it or puts it back
    withdrawn_lent_.insert({k, id});
    return false;
  }
  dropped = take_id(inbox_, k, id);
  if (!dropped) return false;
  release(dropped->node, dropped->data_bytes());
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

uint64_t P2PMailbox::post(const Key& k, std::function<bool()> waits) {
  std::lock_guard<std::mutex> lk(mu_);
  Post& p = posted_[++tickets_];
  p.k = k;
  p.waits = std::move(waits);
  return tickets_;
}

void P2PMailbox::unpost(uint64_t ticket) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto p = posted_.find(ticket);
    if (p == posted_.end()) return;
    // A message that landed in its tensor after its receive returned (its link cut, the frame
    // ending late) would block the pair: no other receive may take it.
    if (p->second.landed) (void)take_landed_locked(p->second.k, ticket);
    posted_.erase(p);
  }
  bump();  // a receive posted later may now take what this one might have
}

bool P2PMailbox::left_to_earlier(const Key& k, uint64_t ticket) const {
  for (auto it = posted_.begin(); it != posted_.end() && it->first < ticket; ++it) {
    const Key& p = it->second.k;
    if (p.group == k.group && p.destination == k.destination && p.tag == k.tag &&
        (p.source == k.source || p.source == kAnySource) && (!it->second.waits || it->second.waits()))
      return true;
  }
  return false;
}

bool P2PMailbox::ended_locked(std::span<const uint32_t> nodes, Status& why) const {
  if (lost_) {
    why = *lost_;
    return true;
  }
  // Every node of `nodes` left in order: none of them will send (or answer).
  for (uint32_t node : nodes) {
    auto gone = gone_.find(node);
    if (gone == gone_.end()) return false;
    why = gone->second;
  }
  return true;
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
        if constexpr (std::is_same_v<T, Message>) {  // it leaves the mailbox (a loan, once kept)
          const Message& m = it->second.front();
          if (loan) lent_.emplace(std::make_pair(it->first, m.id), Room{m.node, m.data_bytes()});
          else release(m.node, m.data_bytes());
        }
        out = std::move(it->second.front());
        it->second.pop_front();
        if (it->second.empty()) box.erase(it);
        return Took::it;
      }
      if (ended_locked(nodes, why)) return Took::ended;
    }
    if (!poller.wait_change(word_, g, deadline)) return Took::nothing;
  }
}

P2PMailbox::Took P2PMailbox::take_message(const Key& k, uint32_t node, Poller& poller, Clock::time_point deadline,
                                          Message& out, Status& why, uint64_t ticket, const Landing* landing) {
  if (landing && ticket) {
    std::lock_guard<std::mutex> lk(mu_);
    if (auto p = posted_.find(ticket); p != posted_.end() && !p->second.landed) p->second.landing = *landing;
  }
  auto pick = [&] {
    auto it = inbox_.find(k);
    if (it == inbox_.end() || it->second.empty() || left_to_earlier(k, ticket)) return inbox_.end();
    // Data that landed in another receive's tensor is that one's (it comes first among the posted).
    if (const uint64_t in = it->second.front().landed_in; in && in != ticket) return inbox_.end();
    if (ticket) disarm(ticket);  // taken, in the same hold of the lock: nothing lands in it from now
    return it;
  };
  return take_first(inbox_, pick, std::span<const uint32_t>(&node, 1), poller, deadline, nullptr, nullptr, out, why);
}

P2PMailbox::Took P2PMailbox::take_answer(const Key& k, uint64_t id, uint32_t node, Poller& poller,
                                         Clock::time_point deadline, Status& out, Status& why,
                                         const std::function<bool()>* stop) {
  auto pick = [&] { return put_first(answers_, k, id); };  // sends of k may run at once
  Answer a;
  const Took took = take_first(answers_, pick, std::span<const uint32_t>(&node, 1), poller, deadline, stop, nullptr, a, why);
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
      if (it != inbox_.end() && !it->second.empty() && !left_to_earlier(key, ticket) && !it->second.front().landed_in &&
          (at == inbox_.end() || it->second.front().order < at->second.front().order))
        at = it;
    }
    return at;
  };
  return take_first(inbox_, first, from_nodes, poller, deadline, &stop, &k, out, why, true);
}

void P2PMailbox::keep(const Key& k, uint64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  if (auto l = lent_.find({k, id}); l != lent_.end()) {
    release(l->second.node, l->second.bytes);
    lent_.erase(l);
  }
  withdrawn_lent_.erase({k, id});  // the receive took it first: its answer is the send's
}

bool P2PMailbox::put_back(const Key& k, Message m) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    lent_.erase({k, m.id});
    if (withdrawn_lent_.erase({k, m.id})) {
      release(m.node, m.data_bytes());
      return true;
    }
    inbox_[k].push_front(std::move(m));
  }
  bump();
  return false;
}

// ---- The windows, and pulls

P2PMailbox::Took P2PMailbox::reserve(uint32_t node, uint64_t bytes, Poller& poller, Clock::time_point deadline,
                                     bool& eager, Status& why) {
  for (;;) {
    const uint32_t g = word_.value.load();
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (ended_locked(std::span<const uint32_t>(&node, 1), why)) return Took::ended;
      Held& o = out_[node];
      if (o.messages < window_.messages) {
        eager = eager && o.bytes + bytes <= eager_;
        ++o.messages;
        if (eager) o.bytes += bytes;
        return Took::it;
      }
    }
    if (!poller.wait_change(word_, g, deadline)) return Took::nothing;
  }
}

void P2PMailbox::unreserve(uint32_t node, uint64_t bytes, bool eager) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    Held& o = out_[node];
    --o.messages;
    if (eager) o.bytes -= bytes;
  }
  bump();  // a send waiting for room may go
}

void P2PMailbox::awaits_pull(const Key& k, uint64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  awaiting_pull_.insert({k, id});
}

bool P2PMailbox::pulled(const Key& k, uint64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  return pulls_.erase({k, id}) > 0;
}

bool P2PMailbox::forget_pull(const Key& k, uint64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  awaiting_pull_.erase({k, id});
  return pulls_.erase({k, id}) > 0;
}

bool P2PMailbox::pull(const Key& k, uint64_t id) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!awaiting_pull_.erase({k, id})) return false;  // pulled once only, while its send waits
    pulls_.insert({k, id});
  }
  bump();
  return true;
}

// ---- Data frames, and the receiver's side of a pull

std::byte* P2PMailbox::body(uint32_t node, uint64_t id, uint64_t bytes, std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = bodies_.find({node, id});
  if (it == bodies_.end() || it->second.writing) {
    why = "sent data for message " + std::to_string(id) +
          (it == bodies_.end() ? ", which no header announced and no receive here pulled" : " twice at once");
    return nullptr;
  }
  Body& b = it->second;
  if (b.bytes != bytes) {
    why = "sent " + std::to_string(bytes) + " bytes for message " + std::to_string(id) + ", of which a receive here pulled " +
          std::to_string(b.bytes);
    return nullptr;
  }
  if (b.given_up) {  // its receive no longer waits: read and dropped
    bodies_.erase(it);
    return nullptr;
  }
  b.writing = true;
  return b.into;
}

void P2PMailbox::body_done(uint32_t node, uint64_t id) { body_ended(node, id, true); }

// A frame that failed midway leaves its receive to end its wait with the connection's end (or its
// timeout).
void P2PMailbox::body_failed(uint32_t node, uint64_t id) { body_ended(node, id, false); }

void P2PMailbox::body_ended(uint32_t node, uint64_t id, bool whole) {
  std::shared_ptr<WaitWord> ended;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = bodies_.find({node, id});
    if (it == bodies_.end()) return;
    ended = it->second.ended;
    if (whole && !it->second.given_up) pulled_[it->second.k].push_back({id, Status::ok()});
    bodies_.erase(it);
  }
  ended->set(1);
  bump();
}

bool P2PMailbox::expect_pull(const Key& k, uint64_t id, uint32_t node, std::byte* into, uint64_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  auto [it, fresh] = bodies_.try_emplace({node, id});
  if (!fresh) return false;  // that node numbered two messages alike (a broken sender)
  it->second.k = k;
  it->second.into = into;
  it->second.bytes = bytes;
  return true;
}

bool P2PMailbox::deliver_pulled(const Key& k, uint64_t id, uint32_t node, Status status) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = bodies_.find({node, id});
    if (status.is_ok() || it == bodies_.end() || it->second.writing || !(it->second.k == k))
      return false;
    const bool given_up = it->second.given_up;
    bodies_.erase(it);
    if (given_up) return true;  // its receive no longer waits: dropped
    pulled_[k].push_back({id, std::move(status)});
  }
  bump();
  return true;
}

P2PMailbox::Took P2PMailbox::take_pulled(const Key& k, uint64_t id, uint32_t node, Poller& poller,
                                         Clock::time_point deadline, Status& status, Status& why) {
  auto pick = [&] { return put_first(pulled_, k, id); };
  Pulled got;
  const Took took = take_first(pulled_, pick, std::span<const uint32_t>(&node, 1), poller, deadline, nullptr, nullptr, got, why);
  if (took == Took::it) status = std::move(got.status);
  return took;
}

std::shared_ptr<WaitWord> P2PMailbox::give_up_pull(const Key& k, uint64_t id, uint32_t node) {
  std::lock_guard<std::mutex> lk(mu_);
  (void)take_id(pulled_, k, id);  // it came just now
  auto it = bodies_.find({node, id});
  if (it == bodies_.end()) return nullptr;
  it->second.given_up = true;  // the sender's answer, when it comes, is dropped
  return it->second.writing ? it->second.ended : nullptr;
}

} // namespace chorus
