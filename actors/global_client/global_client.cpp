#include "actors/global_client/global_client.hpp"

#include <algorithm>

#include "mesh/data_mesh.hpp"
#include "actors/global_client/net_op.hpp"
#include "actors/global_client/p2p.hpp"
#include "core/log.hpp"
#include "core/settings.hpp"
#include "cuda/nccl_job.hpp"
#include "messages/peer_codec.hpp"
#include "transport/host_identity.hpp"
#include "transport/socket.hpp"

namespace chorus {

namespace {
constexpr auto kGrace = std::chrono::seconds(5);
double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }
} // namespace

Result<std::shared_ptr<GlobalClient>> GlobalClient::start(const Config& config, caf::actor_system& sys,
                                                         const RejoinData& rejoin, GlobalClient* before) {
  std::shared_ptr<GlobalClient> c(new GlobalClient);
  c->config_ = config;
  // The join (the orchestrator reached, every node in, the data connections made) has a limit of
  // its own: a launcher may start the orchestrator late, and the ops' timeout is each process's.
  const auto deadline = Clock::now() + config.join_limit();
  std::string ohost;
  uint16_t oport = 0;
  if (!split_host_port(config.orchestrator_address, ohost, oport))
    return Status(Errc::invalid_config, "orchestrator_address '" + config.orchestrator_address + "' is not host:port");
  // Closed once the mesh is made (a port nobody accepts on refuses connections).
  std::unique_ptr<DataListener> listener;
  if (before)
    if (auto again = DataListener::open(before->data_address()); again.is_ok()) listener = std::move(*again);
  if (!listener) {
    auto opened = DataListener::open(config.node_address);
    if (!opened.is_ok()) return opened.status();
    listener = std::move(*opened);
  }
  NodeRegisterData reg;
  reg.protocol_version = protocol_version();
  reg.secret = config.secret;
  reg.config = config;
  reg.num_peers = config.num_devices;
  reg.data_address = listener->address();
  reg.hardware_threads = hardware_threads();
  reg.host_key = host_key();
  // Every node reads every node's count to decide alike whether auto runs an op through NCCL.
  gpu::NcclCalls* nccl = gpu::nccl_calls();
  reg.gpus = nccl ? static_cast<uint32_t>(std::max(0, nccl->device_count())) : 0u;
  reg.rank = config.rank;
  reg.rejoin = rejoin;
  // Links of the epoch before that ended on this side: the next epoch remakes those pairs on both
  // sides (Topology.relink), since the other side may still hold its end as live.
  if (before && rejoin.kind != RejoinData::Kind::none) reg.rejoin.unkept = before->unkept_links();
  reg.newcomer = config.newcomer && rejoin.kind == RejoinData::Kind::none;
  c->p2p_ = std::make_unique<P2PMailbox>(P2PWindow{}, tuned_number(SettingId::p2p_eager_kib) * 1024);  // before joining: a loss notice may come at once
  c->pause_ = PauseWatch::shared();  // the same: a loss notice asks whether we stood still
  c->watched_from_ = PauseWatch::Clock::now();
  std::weak_ptr<GlobalClient> weak = c;
  auto on_lost = [weak](uint32_t node, const std::string& why) {
    if (auto self = weak.lock()) self->on_node_lost(node, why, true);
  };
  auto on_link = [weak](const LinkLostData& l) {
    if (auto self = weak.lock()) self->on_link_notice(l);
  };
  const auto began = Clock::now();
  auto joined = join_orchestrator(config, sys, ohost, oport, reg, deadline, on_lost, on_link, c->orchestrator_,
                                  before ? before->orchestrator_link() : orchestrator_actor{});
  const auto registered = Clock::now();
  if (!joined.is_ok()) return joined;
  c->report_link_ = c->orchestrator_.session->link_reporter();
  c->notices_ = c->orchestrator_.session;
  c->topo_ = c->orchestrator_.session->topology();
  if (config.rank >= 0 && c->topo_.node_id != static_cast<uint32_t>(config.rank)) {
    c->close();
    return Status(Errc::internal, "the orchestrator made this node " + std::to_string(c->topo_.node_id) +
                                      ", not rank " + std::to_string(config.rank) + " as it asked");
  }
  c->reading_.resize(c->topo_.num_nodes);
  c->leaving_.resize(c->topo_.num_nodes);
  c->unacked_since_.reset(new std::atomic<int64_t>[c->topo_.num_nodes]());
  c->arena_answers_.resize(c->topo_.num_nodes);
  c->conns_.resize(c->topo_.num_nodes);
  // A shrink or grow keeps the links between the members that stay. The old epoch read them
  // until now (what its ops still sent arrives and is dropped; a frame of this epoch that came
  // early waits, parked, unread); it lets go of them here, once this epoch has formed.
  std::vector<std::shared_ptr<Connection>> kept;
  if (before)
    kept = before->hand_over_links(Status(Errc::revoked, "collective " + std::to_string(before->topo_.collective) +
                                                            " was left for its next epoch by a " +
                                                            std::string(to_string(rejoin.kind))));
  uint32_t kept_links = 0;
  const auto& relink = c->topo_.relink;
  for (uint32_t j = 0; j < c->topo_.num_nodes; ++j) {
    const int32_t was = j < c->topo_.previous.size() ? c->topo_.previous[j] : -1;
    if (j == c->topo_.node_id || was < 0 || static_cast<size_t>(was) >= kept.size() || !kept[was]) continue;
    if (std::binary_search(relink.begin(), relink.end(), j)) {  // one side could not keep it: both remake it
      kept[was]->cut();
      continue;
    }
    // Frames of the epoch before still on the way are dropped from here on; an ended link is not
    // kept (that pair connects anew).
    if (kept[was]->rehome(j, FrameHeader::magic_of(c->topo_.epoch), c.get())) {
      c->conns_[j] = std::move(kept[was]);
      ++kept_links;
    }
  }
  kept.clear();  // what is not kept stays the old epoch's, closed with it
  if (auto s = connect_mesh(config, c->topo_, *listener, c.get(), deadline, c->conns_); !s.is_ok()) {
    c->close();
    return s;
  }
  c->meshed_.store(true, std::memory_order_release);
  const auto meshed = Clock::now();
  std::vector<Connection*> all;
  for (auto& conn : c->conns_)
    if (conn) all.push_back(conn.get());
  // A thread waiting for bytes from a node of its own host looks at the rings before it sleeps;
  // when this host's peers (one thread each) outnumber its cores, it yields the core between looks.
  unsigned host_peers = 0;
  for (const auto& n : c->topo_.nodes)
    if (n.host == c->topo_.nodes[c->topo_.node_id].host) host_peers += n.num_peers;
  c->poller_.start(all, patience_for(host_peers));
  if (auto s = c->share_arena(deadline); !s.is_ok()) {
    c->close();
    return s;
  }
  if (log_on(LogLevel::info, Subsys::init)) {
    uint32_t hosts = 0;
    for (const auto& n : c->topo_.nodes) hosts = std::max(hosts, n.host + 1);
    log_line(LogLevel::info, Subsys::init, LogWhere{c->topo_.node_id},
             "joined collective " + std::to_string(c->topo_.collective) + " as node " + std::to_string(c->topo_.node_id) +
                 " of " + std::to_string(c->topo_.num_nodes) + " (" + std::to_string(c->topo_.total_peers) + " peers, " +
                 std::to_string(hosts) + " host(s); this node's peers from rank " +
                 std::to_string(c->topo_.nodes[c->topo_.node_id].peer_offset) + "), after " + std::to_string(ms(registered - began)) +
                 " ms at the orchestrator and " + std::to_string(ms(meshed - registered)) + " ms connecting" +
                 (kept_links ? " (" + std::to_string(kept_links) + " links kept)" : std::string()));
  }
  return c;
}

uint32_t GlobalClient::newcomers() const {
  return notices_ ? notices_->newcomers() : 0;
}

std::optional<std::string> GlobalClient::orchestrator_lost() const {
  if (notices_)
    for (const auto& d : notices_->lost())
      if (d.node_id == NodeEvents::kOrchestrator) return d.reason;
  return std::nullopt;
}

bool GlobalClient::wait_newcomers(uint32_t n, Clock::time_point deadline) const {
  return notices_ && notices_->wait_newcomers(n, deadline);
}

GlobalClient::~GlobalClient() {
  close();
  conns_.clear();  // joins the writer threads; nobody can reach the connections any more
}

void GlobalClient::close() {
  std::optional<Failure> failed;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (closed_) return;
    closed_ = true;
    failed = first_failure_;
  }
  if (auto seat = arena()) seat->arena.close();  // the other nodes' peers stop waiting there for ours
  if (failed && meshed_.load(std::memory_order_acquire)) {
    // Why we leave, ahead of the goodbye on every connection (see note_failure).
    FrameHeader h = frame_header(FrameType::leaving);
    h.group = failed->group;
    h.seq = failed->seq;
    const std::string body = encode_leaving(failed->why);
    for (auto& c : conns_)
      if (c && ours(*c)) c->send(SendTicket::owning(h, body));
  }
  for (auto& c : conns_)
    if (c && ours(*c)) c->close();  // bye, drain, shut: later sends fail at once
  poller_.stop();
  // Nobody pumps any more: a frame still arriving (maybe into a caller's memory) fails now, so
  // its waiters let go. The connections themselves stay until the destructor, since ops still in
  // flight may send on them.
  for (auto& c : conns_)
    if (c && ours(*c)) c->stop_reading();
  reading_.clear();
  std::map<std::pair<uint32_t, uint64_t>, std::shared_ptr<NetOp>> ops;
  {
    std::lock_guard<std::mutex> lk(mu_);
    ops.swap(ops_);
  }
  for (auto& [key, op] : ops) op->node_lost(Status(Errc::reset, "the node is shutting down"));
  orchestrator_.leave();
}

gpu::NcclJob* GlobalClient::nccl(Status& error) {
  std::lock_guard<std::mutex> lk(nccl_mu_);
  if (!nccl_) {
    gpu::NcclCalls* calls = gpu::nccl_calls();
    if (!calls) {
      error = {Errc::device_error, "GPU ops across nodes need NCCL, and chorus was built without CUDA"};
      return nullptr;
    }
    nccl_ = std::make_shared<gpu::NcclJob>(topo_.node_id, *calls);
  }
  return nccl_.get();
}

uint32_t GlobalClient::node_of(uint32_t rank) const {
  const auto& nodes = topo_.nodes;
  uint32_t lo = 0, hi = static_cast<uint32_t>(nodes.size());
  while (hi - lo > 1) {  // the last node whose offset <= rank
    uint32_t mid = (lo + hi) / 2;
    if (nodes[mid].peer_offset <= rank) lo = mid;
    else hi = mid;
  }
  return lo;
}

std::vector<uint32_t> GlobalClient::rank_nodes(const std::vector<uint32_t>& members) const {
  std::vector<uint32_t> rank_node;
  rank_node.reserve(members.empty() ? total_peers() : members.size());
  if (members.empty())
    for (uint32_t r = 0; r < total_peers(); ++r) rank_node.push_back(node_of(r));
  else
    for (uint32_t m : members) rank_node.push_back(node_of(m));
  return rank_node;
}

Topology GlobalClient::gpu_topology(const std::vector<uint32_t>& members) const {
  Topology t;
  t.shared_memory = false;
  t.rank_node = rank_nodes(members);
  t.peers = static_cast<int>(t.rank_node.size());
  for (const auto& n : topo_.nodes) t.node_gpus.push_back(n.gpus);
  return t;
}

std::optional<std::string> GlobalClient::stood_still() const {
  auto p = pause_->recent(kStoodStill, kStoodStillWithin);  // set by start(), before any notice
  if (!p || p->from + p->length < watched_from_) return std::nullopt;
  return pause_words(*p) + ", long enough for the orchestrator to drop it from the job";
}

Status GlobalClient::lost() const {
  std::lock_guard<std::mutex> lk(mu_);
  return lost_.value_or(Status::ok());
}

void GlobalClient::on_first_loss(LossListener listener) {
  std::optional<Status> already;
  {
    std::lock_guard<std::mutex> lk(mu_);
    loss_listener_ = listener;
    already = lost_;
  }
  // A loss that came first was not told to this listener (on_node_lost found none, or another).
  if (already && listener) listener(*already);
}

void GlobalClient::on_never_launched(NeverLaunchedListener listener) {
  std::lock_guard<std::mutex> lk(mu_);
  never_listener_ = std::move(listener);
}

void GlobalClient::on_node_lost(uint32_t node, const std::string& heard, bool announced) {
  if (node == NodeEvents::kRevokeNotice) {
    CHORUS_LOG(info, net, (LogWhere{topo_.node_id}), heard);
    return end_every_op(node, Status(Errc::revoked, heard), false);
  }
  // `heard` names the node (or the link); the first loss is what every later op reports. A node
  // that stood still long enough to be dropped reports that instead: the others only cut it off.
  CHORUS_LOG(warn, net, (LogWhere{topo_.node_id}),
             (node < topo_.num_nodes ? "lost node " + std::to_string(node) + ": " : "") + heard);
  end_every_op(node, Status(Errc::node_lost, stood_still().value_or(heard)), announced);
}

void GlobalClient::revoke() {
  if (notices_) notices_->revoke(topo_.collective, topo_.node_id, topo_.ticket);
  end_every_op(topo_.node_id, Status(Errc::revoked, revoked_message(topo_.collective, topo_.node_id)), false);
}

std::vector<uint32_t> GlobalClient::unkept_links() const {
  std::vector<uint32_t> ended;
  if (!meshed_.load(std::memory_order_acquire)) return ended;
  for (uint32_t j = 0; j < conns_.size(); ++j)
    if (j != topo_.node_id && (!conns_[j] || !ours(*conns_[j]) || conns_[j]->ended())) ended.push_back(j);
  return ended;
}

std::vector<std::shared_ptr<Connection>> GlobalClient::hand_over_links(const Status& why) {
  end_every_op(topo_.node_id, why, false);
  poller_.stop();  // nothing reads them here any more
  std::vector<std::shared_ptr<Connection>> links;
  if (!meshed_.load(std::memory_order_acquire)) return links;
  links.resize(conns_.size());
  for (size_t j = 0; j < conns_.size(); ++j)
    if (conns_[j] && ours(*conns_[j])) links[j] = conns_[j];
  return links;
}

void GlobalClient::retire(const Status& why) {
  end_every_op(topo_.node_id, why, false);
  close();
}

void GlobalClient::end_every_op(uint32_t node, const Status& why, bool announced) {
  std::vector<std::shared_ptr<NetOp>> ops;
  LossListener tell;  // only on the first loss
  Status first;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!lost_) {
      lost_ = why;
      tell = loss_listener_;
    }
    first = *lost_;
    for (auto& [k, op] : ops_) ops.push_back(op);
  }
  // A peer waiting in the arena for the lost node's peers goes on at once to the ordinary
  // path, which reports the loss; so does a join waiting for the arena's offer or answers.
  if (auto seat = arena()) seat->arena.close();
  arena_word_.set(kWordTop);
  for (auto& op : ops) op->node_lost(first);
  p2p_->node_lost(first);
  // An op inside NCCL stops at once (no kernel waits for the lost node).
  std::shared_ptr<gpu::NcclJob> job;
  {
    std::lock_guard<std::mutex> lk(nccl_mu_);
    job = nccl_;
  }
  if (job) job->abort_all(first.message());
  // A send to a node the orchestrator announced lost (a frozen one reads nothing: its ring or
  // socket buffer is full) fails at once rather than at the op's timeout; the collective is over
  // for this node anyway. (A loss the data path saw itself has ended or garbled that connection.)
  if (announced && node < topo_.num_nodes && meshed_.load(std::memory_order_acquire) && conns_[node])
    conns_[node]->kill_if(own_magic(), false);
  // The local server's waits for this node's own peers (ops not handed to us yet, and later ones).
  if (tell) tell(first);
}

void GlobalClient::on_link_broken(uint32_t node, const std::string& saw) {
  const LinkLostData l{topo_.collective, topo_.node_id, node, saw};
  on_node_lost(NodeEvents::kLinkNotice, link_lost_message(l));
  // The orchestrator tells the others (the first broken link of the collective); without it, they
  // notice by their op timeouts.
  if (report_link_) report_link_(l);
}

void GlobalClient::on_link_notice(const LinkLostData& l) {
  on_node_lost(NodeEvents::kLinkNotice, link_lost_message(l));
  if (l.other == topo_.node_id && meshed_.load(std::memory_order_acquire) && l.reporter < conns_.size() &&
      conns_[l.reporter])
    conns_[l.reporter]->kill_if(own_magic(), true);
}

void GlobalClient::cut_off(uint32_t node, const std::string& why) {
  on_link_broken(node, why);
  conns_[node]->kill_if(own_magic(), true);
}

void GlobalClient::note_unacked_links() {
  const int64_t now = Clock::now().time_since_epoch().count();
  for (uint32_t node = 0; node < conns_.size(); ++node) {
    if (!conns_[node]) continue;
    if (!conns_[node]->since_ack()) {
      unacked_since_[node].store(0);
      continue;
    }
    int64_t none = 0;  // the earliest note stands while bytes keep waiting
    unacked_since_[node].compare_exchange_strong(none, now);
  }
}

void GlobalClient::check_stalled_links() {
  const auto now = Clock::now();
  const auto least = config_.timeout / 4;
  for (uint32_t node = 0; node < conns_.size(); ++node) {
    const int64_t since = conns_[node] ? unacked_since_[node].load() : 0;
    if (since == 0) continue;
    const auto waited = now - Clock::time_point(Clock::duration(since));
    const auto quiet = conns_[node]->since_ack();
    if (waited < least || !quiet || *quiet < waited) continue;
    if (unacked_since_[node].exchange(0) != since) continue;  // another peer of the op cut it off
    cut_off(node, "no acknowledgment from node " + std::to_string(node) + " for " + std::to_string(quiet->count()) +
                      " ms with bytes waiting: the connection stalled");
  }
}

bool GlobalClient::await_sent(SendTicket& t, uint32_t node, Clock::time_point deadline) {
  // Reading goes on meanwhile (we may lead the poller): the other side may be waiting to send us
  // its data before it reads ours.
  if (!poller_.wait(t.done, 1, deadline, false)) {  // the writer may need this core
    if (ours(*conns_[node]))
      cut_off(node, "node " + std::to_string(node) + " took no data for the whole op timeout (stalled or frozen)");
    // A later epoch may have kept the link with this frame begun on it (Connection::rehome): the
    // caller's memory goes once we return, so the link ends, and that epoch sees it broken.
    conns_[node]->abandon(t);
    t.done.wait_at_least(1, Clock::now() + kGrace);
  }
  return t.done.value.load() == 1;
}

} // namespace chorus
