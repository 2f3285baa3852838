#include "runtime/peer/receive_order.hpp"

#include <algorithm>

#include "core/op_kinds.hpp"

namespace chorus::peer_impl {

namespace {
std::atomic<uint64_t> next_ticket{1};  // 0: no place (P2PMailbox takes it as first in line)

bool overlap(uint32_t a, uint32_t b) { return a == b || a == kAnySource || b == kAnySource; }
} // namespace

ReceiveOrder::Place ReceiveOrder::post(uint32_t source, uint64_t tag) {
  std::lock_guard<std::mutex> lk(mu_);
  // Drawn under the lock: tickets enter the list in rising order.
  const uint64_t ticket = next_ticket.fetch_add(1, std::memory_order_relaxed);
  waiting_.push_back({ticket, source, tag, false});
  unentered_.fetch_add(1);
  return Place(this, ticket);
}

bool ReceiveOrder::blocked(uint64_t ticket) {
  auto me = std::find_if(waiting_.begin(), waiting_.end(), [&](const Waiting& w) { return w.ticket == ticket; });
  if (me == waiting_.end()) return false;
  return std::any_of(waiting_.begin(), me, [&](const Waiting& w) {
    return !w.entered && w.tag == me->tag && overlap(w.source, me->source);
  });
}

void ReceiveOrder::change(uint64_t ticket, bool gone) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = std::find_if(waiting_.begin(), waiting_.end(), [&](const Waiting& w) { return w.ticket == ticket; });
    if (it == waiting_.end() || (!gone && it->entered)) return;
    if (!it->entered) unentered_.fetch_sub(1);
    if (gone) waiting_.erase(it);
    else it->entered = true;
  }
  // A waiter counts itself before it looks (under mu_), so one that looked before this change
  // is counted here and woken.
  if (turn_waiters_.load() != 0) word_.set(word_.value.load() + 1);
}

ReceiveOrder::Place::~Place() {
  if (order_) order_->change(ticket_, true);
}

void ReceiveOrder::Place::entered() const {
  if (order_) order_->change(ticket_, false);
}

bool ReceiveOrder::Place::wait_turn(std::chrono::milliseconds within) const {
  if (!order_) return true;
  ReceiveOrder& o = *order_;
  // Every receive posted before this one was counted before this one's post returned.
  if (o.unentered_.load() <= 1) return true;
  {
    std::lock_guard<std::mutex> lk(o.mu_);
    if (!o.blocked(ticket_)) return true;  // the common case: nothing earlier to wait for
  }
  const Clock::time_point deadline = Clock::now() + within;
  o.turn_waiters_.fetch_add(1);
  bool turn = false;
  for (;;) {
    const uint32_t seen = o.word_.value.load();
    {
      std::lock_guard<std::mutex> lk(o.mu_);
      turn = !o.blocked(ticket_);
    }
    if (turn || !o.word_.wait_at_least(seen + 1, deadline)) break;
  }
  o.turn_waiters_.fetch_sub(1);
  return turn;
}

Status turn_not_taken(const std::string& what, std::chrono::milliseconds timeout) {
  return Status(Errc::timeout, what + ": a receive called before it, which may take the same messages, did not start within " +
                                   std::to_string(timeout.count()) + " ms");
}

} // namespace chorus::peer_impl
