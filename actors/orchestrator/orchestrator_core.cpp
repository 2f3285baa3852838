#include "actors/orchestrator/orchestrator_core.hpp"

#include <algorithm>

#include "messages/peer_codec.hpp"  // protocol_version()

namespace chorus {

Config node_independent(const Config& c) {
  Config n = c;
  const Config defaults;
  n.num_devices = 1;
  n.node_address.clear();
  n.orchestrator_address.clear();
  n.timeout = defaults.timeout;  // each process's own, as is how it was launched:
  n.rank = defaults.rank;
  n.join_timeout = defaults.join_timeout;
  n.host_orchestrator = defaults.host_orchestrator;
  n.rendezvous_file.clear();
  return n;
}

OrchestratorCore::OrchestratorCore(Options o) : opts_(std::move(o)) {}

int OrchestratorCore::index_of(NodeKey who) const {
  for (std::size_t i = 0; i < members_.size(); ++i)
    if (members_[i].key == who) return static_cast<int>(i);
  return -1;
}

std::vector<OrchestratorCore::NodeKey> OrchestratorCore::member_keys() const {
  std::vector<NodeKey> keys;
  for (const Member& m : members_) keys.push_back(m.key);
  return keys;
}

Status OrchestratorCore::check(NodeKey who, const NodeRegisterData& r) const {
  if (r.protocol_version != protocol_version())
    return {Errc::version_mismatch, "protocol version " + std::to_string(r.protocol_version) +
                                        " is not the orchestrator's " + std::to_string(protocol_version())};
  if (complete_)
    return {Errc::busy, "collective " + std::to_string(collective_) +
                                        " is complete and running; register once its nodes have left"};
  if (index_of(who) >= 0) return {Errc::register_twice, "this node is already registered"};
  if (r.num_peers == 0) return {Errc::invalid_argument, "num_peers is 0; a node hosts at least 1 peer"};
  // A node's peers are its process's (Config::num_devices, bounded alike): a larger count would
  // wrap the topology's 32-bit peer offsets and total.
  if (r.num_peers > Config::kMaxDevices)
    return {Errc::invalid_argument, "num_peers " + std::to_string(r.num_peers) + " exceeds " +
                                        std::to_string(Config::kMaxDevices) + " (peers of one node)"};
  if (r.data_address.empty()) return {Errc::invalid_argument, "data_address is empty"};
  if (auto s = r.config.validate(); !s) return s;
  if (r.config.num_nodes != opts_.expected_nodes)
    return {Errc::config_mismatch, "num_nodes (" + std::to_string(r.config.num_nodes) + " vs " +
                                       std::to_string(opts_.expected_nodes) + " expected by the orchestrator)"};
  if (config_) {
    auto diff = node_independent(r.config).first_difference(*config_);
    if (!diff.empty()) return {Errc::config_mismatch, "config differs from the first node's: " + diff};
  }
  for (const auto& m : members_)
    if (m.data_address == r.data_address)
      return {Errc::invalid_argument, "data_address " + r.data_address + " is already used by another node"};
  if (r.rank < -1 || (r.rank >= 0 && static_cast<uint32_t>(r.rank) >= opts_.expected_nodes))
    return {Errc::invalid_argument, "rank " + std::to_string(r.rank) + " is not a node of " +
                                        std::to_string(opts_.expected_nodes) + " (0 to " +
                                        std::to_string(opts_.expected_nodes - 1) + ", or -1: any)"};
  for (const auto& m : members_)
    if (r.rank >= 0 && m.rank == r.rank)
      return {Errc::invalid_argument,
              "rank " + std::to_string(r.rank) + " is taken already, by the node at " + m.data_address};
  return Status::ok();
}

namespace {
// A refusal that ends the admission of the nodes waiting with it: theirs is a job with a node that
// will not come (a mismatched build or config, a rank given twice). Not so a node registering
// twice (that node alone), or a collective that is running (it has every node). (A wrong secret
// never gets here: the front door turns it away.)
bool ends_the_admission(Errc refused) { return refused != Errc::register_twice && refused != Errc::busy; }
} // namespace

OrchestratorCore::Effects OrchestratorCore::on_register(NodeKey who, const NodeRegisterData& r) {
  if (r.rejoin.kind != RejoinData::Kind::none) return on_rejoin(who, r);
  if (r.newcomer && r.protocol_version == protocol_version()) {
    if (complete_ && config_ && config_->elastic) return on_newcomer(who, r);
    // Refused alone: a newcomer never takes a first node's place, nor ends their admission.
    Effects fx;
    fx.replies.push_back({who,
                          complete_ ? Status(Errc::busy, "a newcomer: collective " + std::to_string(collective_) +
                                                             " runs and is not elastic (Config::elastic)")
                                    : Status(Errc::busy, "a newcomer: no elastic job runs here yet (collective " +
                                                             std::to_string(collective_) + " is " +
                                                             (members_.empty() ? "not started" : "being admitted") +
                                                             "); join once it runs"),
                          {}});
    return fx;
  }
  Effects fx;
  if (auto s = check(who, r); !s) {
    if (!complete_ && !members_.empty() && ends_the_admission(s.code())) {
      // Said to the waiting nodes at once, naming the node and why, rather than by the timeout.
      const std::string who_was = r.data_address.empty() ? std::string("a node") : "the node at " + r.data_address;
      Status why(s.code(), "collective " + std::to_string(collective_) + " cannot be complete: " + who_was +
                               " was refused: " + s.message());
      for (const auto& m : members_) fx.replies.push_back({m.key, why, {}});
      reset(fx);
    }
    fx.replies.push_back({who, std::move(s), {}});
    return fx;
  }
  if (members_.empty()) {
    config_ = node_independent(r.config);
    admission_timer_ = next_timer_++;
    fx.timer = std::make_pair(admission_timer_, opts_.timeout);
  }
  members_.push_back({who, r.num_peers, r.data_address, r.hardware_threads, r.host_key, r.gpus, r.rank});
  fx.watch.push_back(who);
  if (members_.size() == opts_.expected_nodes) finish_admission(fx);
  return fx;
}

OrchestratorCore::Effects OrchestratorCore::on_garbled(NodeKey who) {
  Effects fx;
  fx.replies.push_back({who, Status(Errc::invalid_argument, "garbled registration"), {}});
  return fx;
}

void OrchestratorCore::finish_admission(Effects& fx) {
  complete_ = true;
  admission_timer_ = 0;
  // Node ids: a rank given is the node's id; the other nodes fill the ids left, in arrival order.
  std::vector<Member> by_id(members_.size());
  std::vector<bool> taken(members_.size(), false);
  for (const auto& m : members_)
    if (m.rank >= 0) {
      by_id[static_cast<std::size_t>(m.rank)] = m;
      taken[static_cast<std::size_t>(m.rank)] = true;
    }
  std::size_t next = 0;
  for (const auto& m : members_) {
    if (m.rank >= 0) continue;
    while (taken[next]) ++next;
    by_id[next] = m;
    taken[next] = true;
  }
  members_ = std::move(by_id);
  send_topology(fx, {});
}

void OrchestratorCore::send_topology(Effects& fx, const std::vector<int32_t>& previous,
                                     const std::vector<std::vector<uint32_t>>& relink) {
  auto draw = [this] { return opts_.token_source ? opts_.token_source() : 0; };
  TopologyData t;
  t.collective = collective_;
  t.token = draw();
  t.epoch = epoch_;
  t.previous = previous;
  t.num_nodes = static_cast<uint32_t>(members_.size());
  // Hosts are numbered in the order of their first node; an empty key (an older node, or one that
  // could not tell) is a host of its own.
  std::vector<std::string> hosts;
  for (const auto& m : members_) {
    auto it = m.host_key.empty() ? hosts.end() : std::find(hosts.begin(), hosts.end(), m.host_key);
    const auto host = static_cast<uint32_t>(it == hosts.end() ? hosts.size() : it - hosts.begin());
    if (it == hosts.end()) hosts.push_back(m.host_key);
    t.nodes.push_back({m.num_peers, t.total_peers, m.data_address, m.hardware_threads, host, m.gpus});
    t.total_peers += m.num_peers;
  }
  for (std::size_t i = 0; i < members_.size(); ++i) {
    t.node_id = static_cast<uint32_t>(i);
    t.ticket = members_[i].ticket = draw();
    t.relink = i < relink.size() ? relink[i] : std::vector<uint32_t>{};
    fx.replies.push_back({members_[i].key, Status::ok(), t});
  }
}

void OrchestratorCore::reset(Effects& fx) {
  // Their job is gone: neither a rejoin nor a newcomer can be answered a topology now.
  const Status ended(Errc::node_lost, "collective " + std::to_string(collective_) + " ended: every member left");
  end_round(fx, ended);
  for (const auto& m : newcomers_) {
    fx.replies.push_back({m.key, ended, {}});
    fx.forget.push_back(m.key);
  }
  newcomers_.clear();
  for (const auto& m : members_)
    if (!m.left) fx.forget.push_back(m.key);
  members_.clear();
  lost_.clear();  // of the collective that ended: nothing of it is kept
  link_lost_.reset();
  config_.reset();
  complete_ = false;
  admission_timer_ = 0;
  epoch_ = 0;
  past_.reset();
  revoked_ = false;
  ++collective_;
}

void OrchestratorCore::maybe_next_collective(Effects& fx) {
  for (const auto& m : members_)
    if (!m.left) return;
  reset(fx);
}

OrchestratorCore::Effects OrchestratorCore::on_leave(NodeKey who) {
  Effects fx;
  if (drop_waiting(fx, who, Status(Errc::finished, "the node left before its topology came"))) return fx;
  int i = index_of(who);
  if (i < 0 || members_[i].left) return fx;
  if (!complete_) {
    // Still waiting for its topology: answer the pending request and free the slot.
    fx.replies.push_back({who, Status(Errc::finished, "the node left before the collective was complete"), {}});
    members_.erase(members_.begin() + i);
    fx.forget.push_back(who);
    if (members_.empty()) reset(fx);
    return fx;
  }
  members_[i].left = true;
  fx.forget.push_back(who);
  maybe_next_collective(fx);
  if (round_) maybe_finish_round(fx);
  return fx;
}

OrchestratorCore::Effects OrchestratorCore::on_down(NodeKey who, const std::string& reason) {
  Effects fx;
  if (drop_waiting(fx, who, std::nullopt)) return fx;
  int i = index_of(who);
  if (i < 0 || members_[i].left) return fx;
  if (!complete_) {
    members_.erase(members_.begin() + i);  // frees its slot; the others keep waiting
    fx.forget.push_back(who);
    if (members_.empty()) reset(fx);
    return fx;
  }
  members_[i].left = true;
  members_[i].lost = reason;
  fx.forget.push_back(who);
  NodeLostData lost{collective_, static_cast<uint32_t>(i), reason};
  lost_.push_back(lost);
  for (const auto& m : members_)
    if (!m.left) fx.notices.push_back({m.key, lost});
  maybe_next_collective(fx);
  if (round_) maybe_finish_round(fx);  // it may have waited for this node alone
  return fx;
}

OrchestratorCore::Effects OrchestratorCore::on_link_lost(NodeKey who, const LinkLostData& l) {
  Effects fx;
  const int i = index_of(who);
  const auto n = static_cast<uint32_t>(members_.size());
  if (i < 0 || !complete_ || members_[i].left) fx.ignored = "a link report from a node that is no member of a running collective";
  else if (l.collective != collective_)
    fx.ignored = "a link report for collective " + std::to_string(l.collective) + " (running: " +
                 std::to_string(collective_) + ")";
  else if (l.reporter != static_cast<uint32_t>(i))
    fx.ignored = "node " + std::to_string(i) + " reported a link as node " + std::to_string(l.reporter);
  else if (l.other >= n || l.other == l.reporter)
    fx.ignored = "node " + std::to_string(i) + " reported a link to node " + std::to_string(l.other) + " of " +
                 std::to_string(n);
  else if (members_[l.other].left) fx.ignored = "node " + std::to_string(l.other) + " is gone already";
  else if (link_lost_) fx.ignored = "collective " + std::to_string(collective_) + "'s first broken link was told already";
  if (!fx.ignored.empty()) return fx;
  link_lost_ = l;
  for (std::size_t k = 0; k < members_.size(); ++k)
    if (!members_[k].left && k != static_cast<std::size_t>(i)) fx.link_notices.push_back({members_[k].key, l});
  return fx;
}

OrchestratorCore::Effects OrchestratorCore::on_timeout(uint64_t timer) {
  Effects fx;
  if (round_ && timer == round_->timer) {
    std::string missing;
    for (uint32_t id : awaited()) missing += (missing.empty() ? "" : ", ") + std::to_string(id);
    end_round(fx, Status(Errc::timeout, "the " + std::string(to_string(round_->kind)) + " of collective " +
                                            std::to_string(collective_) + ": node(s) " + missing + " did not call it within " +
                                            std::to_string(opts_.timeout.count()) + " ms"));
    return fx;
  }
  if (timer == 0 || timer != admission_timer_ || complete_) return fx;  // stale tick
  Status why(Errc::timeout, "collective " + std::to_string(collective_) + ": only " +
                                std::to_string(members_.size()) + " of " + std::to_string(opts_.expected_nodes) +
                                " nodes registered within " + std::to_string(opts_.timeout.count()) + " ms");
  for (const auto& m : members_) fx.replies.push_back({m.key, why, {}});
  reset(fx);
  return fx;
}

std::vector<JobMemberData> OrchestratorCore::membership() const {
  std::vector<JobMemberData> out;
  if (!complete_) return out;
  for (std::size_t k = 0; k < members_.size(); ++k) {
    const Member& m = members_[k];
    const auto state = !m.left ? JobMemberData::State::joined
                       : m.lost ? JobMemberData::State::lost
                                : JobMemberData::State::left;
    out.push_back({static_cast<uint32_t>(k), state, m.lost.value_or("")});
  }
  return out;
}

} // namespace chorus
