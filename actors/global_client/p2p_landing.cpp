// Eager data straight into the receive's tensor (p2p.hpp): a receive waiting in take_message
// offers its host tensor (a Landing); the data of a message for it that comes meanwhile is
// written there by the transport rather than into a buffer of its own and copied out (up to
// CHORUS_P2P_EAGER_MESSAGE_KIB, one copy less). Only the receive that will take the message gets
// it: the first posted for its key, with nothing of that key queued ahead.
#include "actors/global_client/p2p.hpp"

#include <algorithm>

#include "core/op_kinds.hpp"

namespace chorus {

void P2PMailbox::disarm(uint64_t ticket) {
  if (auto p = posted_.find(ticket); p != posted_.end()) p->second.landing.reset();
}

std::byte* P2PMailbox::land(const Key& k, Message& m) {
  std::lock_guard<std::mutex> lk(mu_);
  if (auto q = inbox_.find(k); q != inbox_.end() && !q->second.empty()) return nullptr;  // an earlier one goes first
  // One lent to a receive from any source may come back first (put_back).
  if (auto l = lent_.lower_bound({k, 0}); l != lent_.end() && l->first.first == k) return nullptr;
  for (auto& [ticket, p] : posted_) {  // in the order of the calls: the first that may take it
    const bool matches = p.k.group == k.group && p.k.destination == k.destination && p.k.tag == k.tag &&
                         (p.k.source == k.source || p.k.source == kAnySource);
    if (!matches || (p.waits && !p.waits())) continue;
    const bool fits = p.k.source == k.source && p.landing && !p.landed && p.landing->dtype == m.dtype &&
                      p.landing->numel == m.numel && p.landing->bytes == m.size;
    if (!fits) return nullptr;  // a receive from any source, or a mismatch, which the receive reports
    p.landed = p.writing = true;
    p.ended = std::make_shared<WaitWord>();
    m.landed_in = ticket;
    m.data = std::shared_ptr<std::byte>(std::shared_ptr<std::byte>(), p.landing->into);  // not owned
    return p.landing->into;
  }
  return nullptr;
}

void P2PMailbox::land_failed(const Message& m) {
  std::shared_ptr<WaitWord> ended;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto p = posted_.find(m.landed_in);
    if (p == posted_.end()) return;
    p->second.writing = false;
    p->second.landed = false;  // nothing of it stays in the tensor worth taking
    ended = p->second.ended;
  }
  if (ended) ended->set(1);
  bump();
}

P2PMailbox::Took P2PMailbox::settle_landing(uint64_t ticket, Message& out, std::shared_ptr<WaitWord>& writing) {
  std::lock_guard<std::mutex> lk(mu_);
  auto p = posted_.find(ticket);
  if (p == posted_.end()) return Took::nothing;
  p->second.landing.reset();
  if (p->second.writing) {
    writing = p->second.ended;
    return Took::nothing;
  }
  if (!p->second.landed) return Took::nothing;
  auto m = take_landed_locked(p->second.k, ticket);
  if (!m) return Took::nothing;  // withdrawn by its sender
  out = std::move(*m);
  return Took::it;
}

std::optional<P2PMailbox::Message> P2PMailbox::take_landed_locked(const Key& k, uint64_t ticket) {
  auto q = inbox_.find(k);
  if (q == inbox_.end()) return std::nullopt;
  auto e = std::find_if(q->second.begin(), q->second.end(), [&](const Message& m) { return m.landed_in == ticket; });
  if (e == q->second.end()) return std::nullopt;
  Message m = std::move(*e);
  q->second.erase(e);
  if (q->second.empty()) inbox_.erase(q);
  release(m.node, m.data_bytes());
  return m;
}

std::size_t P2PMailbox::offered() {
  std::lock_guard<std::mutex> lk(mu_);
  return static_cast<std::size_t>(std::count_if(posted_.begin(), posted_.end(), [](const auto& p) { return p.second.landing.has_value(); }));
}

uint64_t P2PMailbox::landings() {
  std::lock_guard<std::mutex> lk(mu_);
  return landings_;
}

} // namespace chorus
