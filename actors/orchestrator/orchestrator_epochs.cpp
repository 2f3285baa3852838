// The orchestrator's membership epochs (orchestrator_core.hpp): shrink and grow rounds, and the
// newcomers of an elastic job. Free of CAF, like the rest of the core.
#include <algorithm>

#include "actors/orchestrator/orchestrator_core.hpp"
#include "messages/peer_codec.hpp"  // protocol_version()

namespace chorus {

namespace {
// A job's config as every epoch must agree on it: the size it started with may differ from a
// rejoin's or a newcomer's view of it.
Config same_job(const Config& c) {
  Config n = node_independent(c);
  n.num_nodes = 0;
  return n;
}
std::string ids(const std::vector<uint32_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}
} // namespace

bool OrchestratorCore::excluded(uint32_t id) const {
  return round_ && std::binary_search(round_->exclude.begin(), round_->exclude.end(), id);
}

std::vector<uint32_t> OrchestratorCore::awaited() const {
  std::vector<uint32_t> out;
  for (std::size_t k = 0; k < members_.size(); ++k) {
    const auto id = static_cast<uint32_t>(k);
    if (!members_[k].left && !excluded(id) && !round_->rejoined.count(id)) out.push_back(id);
  }
  return out;
}

int OrchestratorCore::rejoiner_of(NodeKey who) const {
  if (round_)
    for (const auto& [id, m] : round_->rejoined)
      if (m.key == who) return static_cast<int>(id);
  return -1;
}

int OrchestratorCore::newcomer_of(NodeKey who) const {
  for (std::size_t i = 0; i < newcomers_.size(); ++i)
    if (newcomers_[i].key == who) return static_cast<int>(i);
  return -1;
}

std::vector<uint32_t> OrchestratorCore::rejoined() const {
  std::vector<uint32_t> out;
  if (round_)
    for (const auto& [id, m] : round_->rejoined) out.push_back(id);
  return out;
}

Status OrchestratorCore::check_rejoin(NodeKey who, const NodeRegisterData& r) const {
  const RejoinData& j = r.rejoin;
  const std::string what = std::string(to_string(j.kind)) + " of collective " + std::to_string(j.collective);
  if (r.protocol_version != protocol_version())
    return {Errc::version_mismatch, "protocol version " + std::to_string(r.protocol_version) +
                                        " is not the orchestrator's " + std::to_string(protocol_version())};
  if (!complete_ || j.collective != collective_) {
    if (past_ && j.collective == past_->collective) {
      auto it = past_->dropped.find(j.node_id);
      if (it != past_->dropped.end()) return {it->second.code(), "the " + what + ": this node " + it->second.message()};
      return {Errc::revoked, "the " + what + ": it has ended, and collective " + std::to_string(collective_) +
                                 " runs without this node"};
    }
    return {Errc::revoked, "the " + what + ": no such collective runs (running: " +
                               (complete_ ? std::to_string(collective_) : std::string("none")) + ")"};
  }
  if (j.node_id >= members_.size() || members_[j.node_id].ticket != j.ticket)
    return {Errc::auth_failed, "the " + what + ": node " + std::to_string(j.node_id) +
                                   " is not a member with that ticket"};
  const Member& m = members_[j.node_id];
  if (m.left && m.lost) return {Errc::node_lost, "the " + what + ": this node was declared lost: " + *m.lost};
  if (m.left) return {Errc::finished, "the " + what + ": this node left the collective"};
  if (index_of(who) >= 0 || rejoiner_of(who) >= 0 || newcomer_of(who) >= 0)
    return {Errc::register_twice, "the " + what + ": this actor is registered already"};
  if (round_ && round_->rejoined.count(j.node_id))
    return {Errc::register_twice, "the " + what + ": node " + std::to_string(j.node_id) + " called it already"};
  if (j.kind == RejoinData::Kind::grow && !config_->elastic)
    return {Errc::invalid_config, "the " + what + ": the job is not elastic (Config::elastic), so no newcomer can join it"};
  if (round_ && round_->kind != j.kind)
    return {Errc::op_mismatch, "the " + what + ": a " + std::string(to_string(round_->kind)) + " is under way"};
  for (uint32_t id : j.unkept)
    if (id >= members_.size() || id == j.node_id)
      return {Errc::invalid_argument, "the " + what + ": it names node " + std::to_string(id) + " of " +
                                          std::to_string(members_.size()) + " as a link it cannot keep"};
  if (j.kind == RejoinData::Kind::grow && !j.exclude.empty())
    return {Errc::invalid_argument, "the " + what + ": a grow excludes nobody (members keep their places)"};
  if (j.kind == RejoinData::Kind::shrink) {
    std::size_t staying = 0;
    for (uint32_t id : j.exclude) {
      if (id >= members_.size())
        return {Errc::invalid_argument, "the " + what + ": it excludes node " + std::to_string(id) + " of " +
                                            std::to_string(members_.size())};
      if (id == j.node_id) return {Errc::invalid_argument, "the " + what + ": it excludes the caller's own node"};
    }
    for (std::size_t k = 0; k < members_.size(); ++k)
      if (!members_[k].left && !std::binary_search(j.exclude.begin(), j.exclude.end(), static_cast<uint32_t>(k)))
        ++staying;
    if (staying == 0) return {Errc::invalid_argument, "the " + what + ": it would leave no node"};
  }
  // Then the round's list: a caller that disagrees learns both, whoever came first.
  if (round_ && round_->exclude != j.exclude)
    return {Errc::invalid_argument, "the " + what + ": it excludes nodes " + ids(j.exclude) + ", the others " +
                                        ids(round_->exclude)};
  if (excluded(j.node_id))
    return {Errc::revoked, "the " + what + ": this node is excluded from it"};
  if (r.num_peers == 0 || r.num_peers > Config::kMaxDevices)
    return {Errc::invalid_argument, "the " + what + ": num_peers " + std::to_string(r.num_peers) + " is not 1 to " +
                                        std::to_string(Config::kMaxDevices)};
  if (r.data_address.empty()) return {Errc::invalid_argument, "the " + what + ": data_address is empty"};
  if (auto diff = same_job(r.config).first_difference(same_job(*config_)); !diff.empty())
    return {Errc::config_mismatch, "the " + what + ": config differs from the job's: " + diff};
  return Status::ok();
}

OrchestratorCore::Effects OrchestratorCore::on_rejoin(NodeKey who, const NodeRegisterData& r) {
  Effects fx;
  if (auto s = check_rejoin(who, r); !s) {
    fx.replies.push_back({who, std::move(s), {}});
    return fx;
  }
  if (!round_) {
    round_ = Round{r.rejoin.kind, r.rejoin.exclude, {}, next_timer_++, {}};
    fx.timer = std::make_pair(round_->timer, opts_.timeout);
  }
  round_->rejoined[r.rejoin.node_id] =
      Member{who, r.num_peers, r.data_address, r.hardware_threads, r.host_key, r.gpus, -1, false, {}, 0};
  for (uint32_t other : r.rejoin.unkept)
    round_->unkept.insert({std::min(other, r.rejoin.node_id), std::max(other, r.rejoin.node_id)});
  fx.watch.push_back(who);
  maybe_finish_round(fx);
  return fx;
}

OrchestratorCore::Effects OrchestratorCore::on_newcomer(NodeKey who, const NodeRegisterData& r) {
  Effects fx;
  Status s = Status::ok();
  if (index_of(who) >= 0 || rejoiner_of(who) >= 0 || newcomer_of(who) >= 0)
    s = {Errc::register_twice, "this node is already registered"};
  else if (r.num_peers == 0 || r.num_peers > Config::kMaxDevices)
    s = {Errc::invalid_argument, "num_peers " + std::to_string(r.num_peers) + " is not 1 to " +
                                     std::to_string(Config::kMaxDevices)};
  else if (r.data_address.empty())
    s = {Errc::invalid_argument, "data_address is empty"};
  else if (auto v = r.config.validate(); !v)
    s = v;
  else if (auto diff = same_job(r.config).first_difference(same_job(*config_)); !diff.empty())
    s = {Errc::config_mismatch, "a newcomer to elastic collective " + std::to_string(collective_) +
                                    ": config differs from the job's: " + diff};
  else
    for (const auto& m : newcomers_)
      if (m.data_address == r.data_address)
        s = {Errc::invalid_argument, "data_address " + r.data_address + " is already used by another newcomer"};
  if (!s) {  // refused alone: the running job goes on undisturbed
    fx.replies.push_back({who, std::move(s), {}});
    return fx;
  }
  newcomers_.push_back({who, r.num_peers, r.data_address, r.hardware_threads, r.host_key, r.gpus, -1, false, {}, 0});
  fx.watch.push_back(who);
  tell_newcomers(fx);
  return fx;
}

void OrchestratorCore::tell_newcomers(Effects& fx) const {
  for (const auto& m : members_)
    if (!m.left) fx.newcomer_notices.push_back({m.key, collective_, static_cast<uint32_t>(newcomers_.size())});
}

void OrchestratorCore::maybe_finish_round(Effects& fx) {
  if (!awaited().empty()) return;
  Round round = std::move(*round_);
  round_.reset();
  // The epoch before: who is not in the next one, and why (for a late rejoin); its actors are
  // forgotten (the nodes' earlier incarnations, which leave once the new ones run).
  Past past{collective_, {}};
  for (std::size_t k = 0; k < members_.size(); ++k) {
    const auto id = static_cast<uint32_t>(k);
    const Member& m = members_[k];
    if (round.rejoined.count(id)) {
      if (!m.left) fx.forget.push_back(m.key);
      continue;
    }
    if (m.lost) past.dropped[id] = Status(Errc::node_lost, "was declared lost: " + *m.lost);
    else if (!m.left) past.dropped[id] = Status(Errc::revoked, "was excluded by the shrink");
    else past.dropped[id] = Status(Errc::finished, "left the collective");
    if (!m.left) fx.forget.push_back(m.key);
  }
  std::vector<Member> next;
  std::vector<int32_t> previous;
  for (auto& [id, m] : round.rejoined) {
    next.push_back(std::move(m));
    previous.push_back(static_cast<int32_t>(id));
  }
  if (round.kind == RejoinData::Kind::grow) {
    for (auto& m : newcomers_) {
      next.push_back(std::move(m));
      previous.push_back(-1);
    }
    newcomers_.clear();
  }
  past_ = std::move(past);
  members_ = std::move(next);
  lost_.clear();
  link_lost_.reset();
  ++collective_;
  ++epoch_;
  revoked_ = false;
  send_topology(fx, previous, links_to_remake(round, previous));
  if (!newcomers_.empty()) tell_newcomers(fx);  // a shrink leaves them waiting: the new members hear of them
}

std::vector<std::vector<uint32_t>> OrchestratorCore::links_to_remake(const Round& round,
                                                                    const std::vector<int32_t>& previous) {
  std::map<uint32_t, uint32_t> now;  // old id -> new id, of the members that stay
  for (std::size_t i = 0; i < previous.size(); ++i)
    if (previous[i] >= 0) now[static_cast<uint32_t>(previous[i])] = static_cast<uint32_t>(i);
  std::vector<std::vector<uint32_t>> relink(previous.size());
  for (const auto& [a, b] : round.unkept) {
    auto na = now.find(a), nb = now.find(b);
    if (na == now.end() || nb == now.end()) continue;  // one of them is not in the next epoch
    relink[na->second].push_back(nb->second);
    relink[nb->second].push_back(na->second);
  }
  for (auto& r : relink) std::sort(r.begin(), r.end());
  return relink;
}

void OrchestratorCore::end_round(Effects& fx, const Status& why) {
  if (round_) {
    for (const auto& [id, m] : round_->rejoined) {
      fx.replies.push_back({m.key, why, {}});
      fx.forget.push_back(m.key);
    }
    round_.reset();
  }
  // Newcomers wait on through a failed round (the next grow may take them); reset() answers them.
}

OrchestratorCore::Effects OrchestratorCore::on_revoke(NodeKey who, uint64_t collective, uint32_t node, uint64_t ticket) {
  Effects fx;
  const int i = index_of(who);
  if (i < 0 || !complete_ || members_[i].left) fx.ignored = "a revoke from a node that is no member of a running collective";
  else if (collective != collective_)
    fx.ignored = "a revoke of collective " + std::to_string(collective) + " (running: " + std::to_string(collective_) + ")";
  else if (node != static_cast<uint32_t>(i) || members_[i].ticket != ticket)
    fx.ignored = "node " + std::to_string(i) + " revoked as node " + std::to_string(node) + " or with another's ticket";
  else if (revoked_)
    fx.ignored = "collective " + std::to_string(collective_) + " is revoked already";
  if (!fx.ignored.empty()) return fx;
  revoked_ = true;
  for (std::size_t k = 0; k < members_.size(); ++k)
    if (!members_[k].left && k != static_cast<std::size_t>(i)) fx.revoke_notices.push_back({members_[k].key, collective_, node});
  return fx;
}

bool OrchestratorCore::drop_waiting(Effects& fx, NodeKey who, const std::optional<Status>& why) {
  if (int id = rejoiner_of(who); id >= 0) {
    // That incarnation went away before the round formed: its member may still rejoin, or be lost.
    if (why) fx.replies.push_back({who, *why, {}});
    fx.forget.push_back(who);
    round_->rejoined.erase(static_cast<uint32_t>(id));
    if (round_->rejoined.empty()) round_.reset();  // its timer is stale then
    return true;
  }
  if (int i = newcomer_of(who); i >= 0) {
    if (why) fx.replies.push_back({who, *why, {}});
    fx.forget.push_back(who);
    newcomers_.erase(newcomers_.begin() + i);
    tell_newcomers(fx);
    return true;
  }
  return false;
}

} // namespace chorus
