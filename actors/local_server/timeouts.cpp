// The local server core: timers, and what expires when one fires (an op, a group, a send/recv half).
#include "actors/local_server/server_core.hpp"

#include "actors/global_client/global_client.hpp"

namespace chorus {

namespace {
std::string names(const std::vector<int>& ps) {
  std::string s = ps.size() == 1 ? "peer " : "peers ";
  for (std::size_t i = 0; i < ps.size(); ++i) s += (i ? ", " : "") + std::to_string(ps[i]);
  return s;
}
} // namespace

void LocalServerCore::start_timer(uint64_t key) {
  if (timer_) timer_(key, config_->timeout);
}

void LocalServerCore::on_timeout(uint64_t key) {
  std::lock_guard<std::mutex> lk(mu_);
  if (auto t = group_timers_.find(key); t != group_timers_.end()) {
    auto pit = pending_groups_.find(t->second);
    group_timers_.erase(t);
    if (pit == pending_groups_.end()) return;
    std::vector<int> missing;
    for (uint32_t m : pit->first)
      if (!pit->second.arrivals.count(m)) missing.push_back(static_cast<int>(m));
    Status why(Errc::timeout, "new group: " + names(missing) + " never asked for it within " +
                                  std::to_string(config_ ? config_->timeout.count() : 0) + " ms");
    for (auto& [peer, c] : pit->second.arrivals) c.reply->complete(why);
    pending_groups_.erase(pit);
    return;
  }
  if (auto t = op_timers_.find(key); t != op_timers_.end()) {
    const OpKey ok = t->second;
    const uint64_t seq = ok.second;
    op_timers_.erase(t);
    auto it = ops_.find(ok);
    if (it == ops_.end() || it->second.failed) return;
    PendingOp& op = it->second;
    std::vector<int> missing;
    for (std::size_t p = 0; p < op.arrivals.size(); ++p)
      if (!op.arrivals[p]) missing.push_back(static_cast<int>(p + (global_ && ok.first == 0 ? global_->offset() : 0)));
    op.failed = true;
    op.failure = Status(Errc::timeout, op_label(op.kind, seq) + ": " + names(missing) + " never called within " +
                                           std::to_string(config_->timeout.count()) + " ms");
    for (auto& a : op.arrivals)
      if (a) a->call.reply->complete(op.failure);
    op.answered = op.arrived;
    op.arrivals.assign(op.arrivals.size(), std::nullopt);
    return;
  }
  auto t = p2p_timers_.find(key);
  if (t == p2p_timers_.end() || !config_) return;
  P2PKey pk = t->second;
  p2p_timers_.erase(t);
  for (auto* q : {&sends_, &recvs_}) {
    auto it = q->find(pk);
    if (it == q->end()) continue;
    auto& halves = it->second;
    for (auto h = halves.begin(); h != halves.end(); ++h) {
      if (h->timer != key) continue;
      const auto& [gid, src, dst, tag] = pk;
      bool is_send = q == &sends_;
      h->arrival.call.reply->complete(Status(
          Errc::timeout, std::string(is_send ? "send" : "recv") + " " + std::to_string(src) + "->" +
                             std::to_string(dst) + " tag " + std::to_string(tag) + ": peer " +
                             std::to_string(is_send ? dst : src) + " never posted the matching " +
                             (is_send ? "recv" : "send") + " within " + std::to_string(config_->timeout.count()) + " ms"));
      halves.erase(h);
      if (halves.empty()) q->erase(it);
      return;
    }
  }
}

} // namespace chorus
