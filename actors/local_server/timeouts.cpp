// The local server core: what ends a wait before its peers have all come. A request's deadline
// (its waiter calls on_timeout with the request's timer id, which expires an op, a group or a
// send/recv half); and in multi-node mode a lost node, which ends every collective at once
// (pairs within the node go on: they need no other node).
#include "actors/local_server/server_core.hpp"

#include "actors/global_client/global_client.hpp"
#include "core/op_kinds.hpp"
#include "messages/status_codec.hpp"  // rank_phrase

namespace chorus {

void LocalServerCore::fail_op(PendingOp& op, Status why) {
  op.failed = true;
  op.failure = std::move(why);
  for (auto& a : op.arrivals)
    if (a) a->call.reply->complete(op.failure);
  op.answered = op.arrived;
  op.arrivals.assign(op.arrivals.size(), std::nullopt);
}

void LocalServerCore::set_global(std::shared_ptr<GlobalClient> g) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    global_ = g;
  }
  // Registered without the core's lock (the client takes its own to store it, and calls it at
  // once when a node is lost already). A weak reference: the client may outlive the core.
  std::weak_ptr<LocalServerCore> weak = weak_from_this();
  g->on_first_loss([weak](const Status& why) {
    if (auto core = weak.lock()) core->on_node_lost(why);
  });
  g->on_never_launched([weak](uint32_t group, uint64_t seq, const Status& why) {
    auto core = weak.lock();
    return core && core->on_never_launched_elsewhere(group, seq, why);
  });
}

bool LocalServerCore::on_never_launched_elsewhere(uint32_t group, uint64_t seq, const Status& why) {
  std::lock_guard<std::mutex> lk(mu_);
  const OpKey key{group, seq};
  if (auto it = ops_.find(key); it != ops_.end()) {
    if (it->second.failed) return false;  // it failed here first (its own timeout told the others)
    fail_op(it->second, why);
    if (global_) global_->note_failure(group, seq, why);  // a leaf lock: told when the node leaves
    return true;
  }
  // Not called here yet (the global client asks only while the op has not launched here; a
  // launch under way meanwhile leaves a note that nobody asks for, dropped in time).
  if (noted_never_.size() == kNotedNever) noted_never_.pop_front();
  noted_never_.emplace_back(key, why);
  return false;
}

void LocalServerCore::on_node_lost(const Status& why) {
  std::lock_guard<std::mutex> lk(mu_);
  if (node_lost_) return;
  node_lost_ = why;
  // The ops still waiting here for this node's own peers; those launched already wait in the
  // global client, which fails them itself. Later ops fail at their first peer (collective()).
  for (auto& [key, op] : ops_)
    if (!op.failed) fail_op(op, lost_op(op.kind, key.second, why));
}

std::vector<int> LocalServerCore::arrival_ranks(uint32_t group) const {
  const uint32_t n = config_ ? config_->num_devices : 0;
  const uint32_t offset = global_ ? global_->offset() : 0;
  std::vector<int> ranks;
  if (group == 0) {
    for (uint32_t p = 0; p < n; ++p) ranks.push_back(static_cast<int>(offset + p));
    return ranks;
  }
  auto g = groups_.find(group);
  if (g == groups_.end()) return ranks;
  for (std::size_t r = 0; r < g->second.members.size(); ++r) {
    const uint32_t m = g->second.members[r];
    if (!global_ || (m >= offset && m < offset + n)) ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

std::vector<int> LocalServerCore::missing_from(const OpKey& key, const PendingOp& op) const {
  const std::vector<int> ranks = arrival_ranks(key.first);
  std::vector<int> missing;
  for (std::size_t p = 0; p < op.arrivals.size(); ++p)
    if (!op.arrivals[p]) missing.push_back(p < ranks.size() ? ranks[p] : static_cast<int>(p));
  return missing;
}

std::vector<int> LocalServerCore::came_to(const OpKey& key, const PendingOp& op) const {
  const std::vector<int> ranks = arrival_ranks(key.first);
  std::vector<int> came;
  for (std::size_t p = 0; p < op.arrivals.size(); ++p)
    if (op.arrivals[p]) came.push_back(p < ranks.size() ? ranks[p] : static_cast<int>(p));
  return came;
}

std::vector<int> LocalServerCore::missing_from(const std::vector<uint32_t>& members, const PendingGroup& g) {
  std::vector<int> missing;
  for (uint32_t m : members)
    if (!g.arrivals.count(m)) missing.push_back(static_cast<int>(m));
  return missing;
}

namespace {
// "rank 0 waits for ranks 1-2": the ranks as the log's fields and the reports name them.
std::string wait_phrase(const std::vector<int>& waiting, const std::vector<int>& awaited) {
  const std::vector<uint32_t> w(waiting.begin(), waiting.end()), a(awaited.begin(), awaited.end());
  return rank_phrase(w) + (w.size() == 1 ? " waits for " : " wait for ") + rank_phrase(a);
}
} // namespace

std::string LocalServerCore::at_half_time(uint64_t key, LogWhere& where) {
  std::unique_lock<std::mutex> lk(mu_);
  where.node = global_ ? static_cast<int64_t>(global_->node_id()) : -1;
  if (auto t = op_timers_.find(key); t != op_timers_.end()) {
    auto it = ops_.find(t->second);
    if (it == ops_.end() || it->second.failed || it->second.warned) return {};
    it->second.warned = true;
    const auto [group, seq] = t->second;
    where.group = group;
    where.op = static_cast<int64_t>(seq);
    const std::vector<int> missing = missing_from(t->second, it->second);
    std::string what = op_label(it->second.kind, seq) + ": " + wait_phrase(came_to(t->second, it->second), missing) +
                       " (not called yet)";
    if (!global_) return what;
    // The other nodes of the op, told without the lock.
    std::vector<uint32_t> members, ranks(missing.begin(), missing.end());
    if (auto g = groups_.find(group); group != 0 && g != groups_.end()) members = g->second.members;
    auto global = global_;
    lk.unlock();
    if (!ranks.empty()) global->tell_stragglers(group, seq, members, ranks);
    return what;
  }
  if (auto t = group_timers_.find(key); t != group_timers_.end()) {
    auto pit = pending_groups_.find(t->second);
    if (pit == pending_groups_.end() || pit->second.warned) return {};
    pit->second.warned = true;
    std::vector<int> asked;
    for (const auto& [peer, call] : pit->second.arrivals) asked.push_back(static_cast<int>(peer));
    return "new group: " + wait_phrase(asked, missing_from(pit->first, pit->second)) + " (not asked for it yet)";
  }
  return {};
}

std::string LocalServerCore::op_waits_for(uint32_t group, uint64_t seq) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = ops_.find(OpKey{group, seq});
  if (it == ops_.end() || it->second.failed) return {};
  return peer_names(missing_from(it->first, it->second)) + " of this node (not called yet)";
}

void LocalServerCore::on_timeout(uint64_t key, std::optional<std::chrono::milliseconds> waited) {
  std::unique_lock<std::mutex> lk(mu_);
  const std::chrono::milliseconds bound = waited.value_or(config_ ? config_->timeout : std::chrono::milliseconds(0));
  if (auto t = group_timers_.find(key); t != group_timers_.end()) {
    auto pit = pending_groups_.find(t->second);
    group_timers_.erase(t);
    if (pit == pending_groups_.end()) return;
    Status why(Errc::timeout, "new group: " + peer_names(missing_from(pit->first, pit->second)) + " never asked for it within " +
                                  std::to_string(bound.count()) + " ms");
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
    const std::vector<int> missing = missing_from(ok, op);
    // Across nodes in the words the other nodes use at their deadline (NetOp::conclude), so that
    // every peer everywhere reports one error, whichever hears of it first.
    const std::string never = global_ ? rank_phrase(std::vector<uint32_t>(missing.begin(), missing.end())) +
                                            " never called within the op's timeout"
                                      : peer_names(missing) + " never called within " + std::to_string(bound.count()) + " ms";
    fail_op(op, Status(Errc::timeout, op_label(op.kind, seq) + ": " + never));
    if (!global_) return;
    global_->note_failure(ok.first, seq, op.failure);  // a leaf lock: told when the node leaves
    // The op's other nodes stop waiting for this one at once (told without the lock).
    std::vector<uint32_t> members;
    if (auto g = groups_.find(ok.first); ok.first != 0 && g != groups_.end()) members = g->second.members;
    auto global = global_;
    const Status why = op.failure;
    lk.unlock();
    global->tell_never_called(ok.first, seq, members, why);
    return;
  }
  if (!config_) return;
  P2PKey pk;
  bool is_send = false;
  auto half = take_half(key, pk, is_send);
  if (!half) return;
  const auto& [gid, src, dst, tag] = pk;
  const std::string waits = src == kAnySource
                                ? "recv any->" + std::to_string(dst) + " tag " + std::to_string(tag) + ": no peer sent to peer " +
                                      std::to_string(dst) + " with tag " + std::to_string(tag)
                                : std::string(is_send ? "send" : "recv") + " " + std::to_string(src) + "->" + std::to_string(dst) +
                                      " tag " + std::to_string(tag) + ": peer " + std::to_string(is_send ? dst : src) +
                                      " never posted the matching " + (is_send ? "recv" : "send");
  half->arrival.call.reply->complete(Status(Errc::timeout, waits + " within " + std::to_string(bound.count()) + " ms"));
}

bool LocalServerCore::withdraw(uint64_t key) {
  std::lock_guard<std::mutex> lk(mu_);
  P2PKey pk;
  bool is_send = false;
  return take_half(key, pk, is_send).has_value();
}

std::optional<LocalServerCore::P2PHalf> LocalServerCore::take_half(uint64_t key, P2PKey& pk, bool& is_send) {
  auto t = p2p_timers_.find(key);
  if (t == p2p_timers_.end()) return std::nullopt;
  pk = t->second;
  p2p_timers_.erase(t);
  for (auto* q : {&sends_, &recvs_}) {
    auto it = q->find(pk);
    if (it == q->end()) continue;
    auto& halves = it->second;
    for (auto h = halves.begin(); h != halves.end(); ++h) {
      if (h->timer != key) continue;
      is_send = q == &sends_;
      std::optional<P2PHalf> taken(std::move(*h));
      halves.erase(h);
      if (halves.empty()) q->erase(it);
      return taken;
    }
  }
  return std::nullopt;
}

} // namespace chorus
