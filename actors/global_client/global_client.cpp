#include "actors/global_client/global_client.hpp"

#include <unistd.h>

#include <cstring>
#include <deque>
#include <limits>
#include <tuple>

#include "actors/global_client/net_op.hpp"
#include "actors/orchestrator/orchestrator.hpp"
#include "messages/data_codec.hpp"
#include "messages/peer_codec.hpp"
#include "transport/socket.hpp"
#include "transport/tcp/tcp_connection.hpp"
#include "transport/tls/tls_channel.hpp"

namespace chorus {

// Point-to-point messages from other nodes and the answers to our own sends, matched FIFO per
// (source, destination, tag).
class P2PMailbox {
 public:
  using Key = std::tuple<uint32_t, uint32_t, uint64_t>;
  struct Message {
    DType dtype;
    uint64_t numel;
    std::string bytes;   // the whole frame: the header, then the data from `offset`
    std::size_t offset;
    Status failed;       // the sender could not send (then there is no data)
  };
  std::mutex mu;
  WaitWord word;  // bumped whenever something arrives
  std::map<Key, std::deque<Message>> inbox;
  std::map<Key, std::deque<Status>> acks;
  std::optional<Status> lost;            // a node died: every pair fails
  std::map<uint32_t, Status> gone;       // nodes that left in order: pairs with them fail
  // Per connection (whoever pumps it): the frame being read.
  std::vector<std::string> frames;

  void bump() {
    uint32_t v = word.value.load();
    if (v != std::numeric_limits<uint32_t>::max()) word.set(v + 1);
  }
};

namespace {

constexpr auto kGrace = std::chrono::seconds(5);

// The hello travels inside the TLS session when there is one.
Status send_hello(int fd, TlsChannel* tls, const TopologyData& t, Clock::time_point deadline) {
  FrameHeader h;
  h.type = FrameType::hello;
  const std::string frame = whole_frame(h, encode_data_hello(DataHello{protocol_version(), t.collective, t.node_id, t.token}));
  return tls ? tls->write_all(fd, frame.data(), frame.size(), deadline)
             : write_exact(fd, frame.data(), frame.size(), deadline);
}

// Reads one hello frame and checks it belongs to this collective; returns the sender's node id.
Status read_hello(int fd, TlsChannel* tls, const TopologyData& t, Clock::time_point deadline, uint32_t& node) {
  auto read = [&](void* p, std::size_t n) {
    return tls ? tls->read_exact(fd, p, n, deadline) : read_exact(fd, p, n, deadline);
  };
  FrameHeader h;
  if (auto s = read(&h, sizeof h); !s) return s;
  if (h.magic != FrameHeader::kMagic || h.type != FrameType::hello || h.bytes > 4096)
    return {Errc::invalid_argument, "garbled hello frame"};
  std::string body(h.bytes, '\0');
  if (auto s = read(body.data(), body.size()); !s) return s;
  std::string error;
  auto hello = decode_data_hello(body.data(), body.size(), error);
  if (!hello) return {Errc::invalid_argument, error};
  if (hello->protocol_version != protocol_version())
    return {Errc::version_mismatch, "data hello speaks protocol " + std::to_string(hello->protocol_version)};
  if (hello->collective != t.collective || hello->token != t.token)
    return {Errc::auth_failed, "data hello with a wrong collective or token"};
  if (hello->node >= t.num_nodes || hello->node == t.node_id)
    return {Errc::invalid_argument, "data hello names node " + std::to_string(hello->node)};
  node = hello->node;
  return Status::ok();
}

std::string pair_label(uint32_t src, uint32_t dst, uint64_t tag) {
  return "send/recv " + std::to_string(src) + "->" + std::to_string(dst) + " tag " + std::to_string(tag);
}

} // namespace

Result<std::shared_ptr<GlobalClient>> GlobalClient::start(const Config& config) {
  std::shared_ptr<GlobalClient> c(new GlobalClient);
  c->config_ = config;
  const auto deadline = Clock::now() + config.timeout;
  std::string ohost, lhost;
  uint16_t oport = 0, lport = 0;
  if (!split_host_port(config.orchestrator_address, ohost, oport))
    return Status(Errc::invalid_config, "orchestrator_address '" + config.orchestrator_address + "' is not host:port");
  if (!split_host_port(config.node_address, lhost, lport)) {
    lhost = config.node_address;
    lport = 0;
  }
  int listen_fd = -1;
  uint16_t bound = 0;
  if (auto s = tcp_listen(lhost, lport, listen_fd, bound); !s) return s;
  struct Closer {
    int fd;
    ~Closer() { if (fd >= 0) ::close(fd); }
  } closer{listen_fd};

  // The orchestrator is reached with CAF remoting; probe it first so an unreachable host fails
  // within our timeout rather than the operating system's.
  int probe = -1;
  if (auto s = tcp_connect(ohost, oport, deadline, probe); !s)
    return Status(Errc::unreachable, "cannot reach the orchestrator at " + config.orchestrator_address + ": " + s.message());
  ::close(probe);
  NodeRegisterData reg;
  reg.protocol_version = protocol_version();
  reg.secret = config.secret;
  reg.config = config;
  reg.num_peers = config.num_devices;
  reg.data_address = lhost + ":" + std::to_string(bound);
  reg.hardware_threads = hardware_threads();
  c->p2p_ = std::make_unique<P2PMailbox>();  // before join: a loss notice may come at once
  std::weak_ptr<GlobalClient> weak = c;
  // A connection that silently loses our messages (seen rarely when many nodes connect at once)
  // is replaced by a fresh actor system and connection until the timeout.
  for (;;) {
    c->cfg_ = std::make_unique<caf::actor_system_config>();
    c->cfg_->set("scheduler.max-threads", 2);
    c->cfg_->set("logger.verbosity", caf::atom("quiet"));
    configure_remoting(*c->cfg_, std::chrono::milliseconds(500),
                       TlsFiles{config.tls_certificate, config.tls_key, config.tls_ca});
    c->system_ = std::make_unique<caf::actor_system>(*c->cfg_);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    auto session = NodeSession::join(*c->system_, ohost, oport, reg, std::max(left, std::chrono::milliseconds(1)),
                                     [weak](const NodeLostData& d) {
                                       if (d.node_id == std::numeric_limits<uint32_t>::max()) return;  // the orchestrator
                                       if (auto self = weak.lock())
                                         self->on_node_lost(d.node_id, "node " + std::to_string(d.node_id) + " lost: " + d.reason);
                                     });
    if (session) {
      c->session_ = std::move(*session);
      break;
    }
    const bool silent = session.status().code() == Errc::unreachable &&
                        session.status().message().find("never answered") != std::string::npos;
    c->system_.reset();
    if (!silent || Clock::now() >= deadline) return session.status();
  }
  c->topo_ = c->session_->topology();
  c->current_.resize(c->topo_.num_nodes);
  c->current_slot_.resize(c->topo_.num_nodes);
  c->scratch_.resize(c->topo_.num_nodes);
  c->p2p_->frames.resize(c->topo_.num_nodes);
  if (auto s = c->connect_all(config, listen_fd); !s) {
    c->close();
    return s;
  }
  return c;
}

Status GlobalClient::connect_all(const Config& config, int listen_fd) {
  const auto deadline = Clock::now() + config.timeout;
  const uint32_t me = topo_.node_id, n = topo_.num_nodes;
  std::vector<int> fds(n, -1);
  auto fail = [&](Status s) {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
    return s;
  };
  // With TLS files, every data connection is TLS with the same certificate, key and CA as the
  // control channel (mutually authenticated); never a silent fallback to plain TCP.
  std::shared_ptr<TlsContext> tls;
  if (config.has_tls()) {
    auto ctx = TlsContext::load(config.tls_certificate, config.tls_key, config.tls_ca);
    if (!ctx) return ctx.status();
    tls = std::move(*ctx);
  }
  std::vector<std::unique_ptr<TlsChannel>> channels(n);
  // Lower ids accept (the TLS servers), higher ids connect: every pair gets exactly one connection.
  for (uint32_t j = 0; j < me; ++j) {
    const std::string name = "node " + std::to_string(j);
    std::string host;
    uint16_t port = 0;
    if (!split_host_port(topo_.nodes[j].data_address, host, port))
      return fail({Errc::internal, name + " has data address '" + topo_.nodes[j].data_address + "'"});
    if (auto s = tcp_connect(host, port, deadline, fds[j]); !s)
      return fail({s.code(), "data connection to " + name + ": " + s.message()});
    if (tls) {
      auto ch = TlsChannel::handshake(*tls, fds[j], /*server=*/false, deadline);
      if (!ch) {
        const Errc code = ch.status().code() == Errc::timeout ? Errc::timeout : Errc::auth_failed;
        return fail({code, "data connection to " + name + ": " + ch.status().message()});
      }
      channels[j] = std::move(*ch);
    }
    uint32_t who = 0;
    if (auto s = send_hello(fds[j], channels[j].get(), topo_, deadline); !s)
      return fail({s.code(), "data hello to " + name + ": " + s.message()});
    // Under TLS 1.3 a node that refuses our certificate says so here (its alert), not in the handshake.
    if (auto s = read_hello(fds[j], channels[j].get(), topo_, deadline, who); !s || who != j)
      return fail({Errc::auth_failed, name + " answered the data hello wrongly" + (s ? "" : ": " + s.message())});
  }
  for (uint32_t waiting = n - 1 - me; waiting > 0;) {
    int fd = -1;
    if (auto s = tcp_accept(listen_fd, deadline, fd); !s)
      return fail({Errc::timeout, "node " + std::to_string(me) + ": " + std::to_string(waiting) +
                                      " data connection(s) never arrived within the timeout"});
    // A stranger (no TLS or a foreign certificate, wrong token, garbage) is turned away without
    // disturbing the nodes still to come.
    std::unique_ptr<TlsChannel> ch;
    if (tls) {
      auto r = TlsChannel::handshake(*tls, fd, /*server=*/true, deadline);
      if (!r) {
        ::close(fd);
        continue;
      }
      ch = std::move(*r);
    }
    uint32_t who = 0;
    if (!read_hello(fd, ch.get(), topo_, deadline, who) || who < me || fds[who] >= 0 ||
        !send_hello(fd, ch.get(), topo_, deadline)) {
      ::close(fd);
      continue;
    }
    fds[who] = fd;
    channels[who] = std::move(ch);
    --waiting;
  }
  conns_.resize(n);
  std::vector<Connection*> all;
  for (uint32_t j = 0; j < n; ++j)
    if (j != me) {
      conns_[j] = tcp_connection(fds[j], j, this, std::move(channels[j]));
      all.push_back(conns_[j].get());
    }
  poller_.start(all);
  return Status::ok();
}

GlobalClient::~GlobalClient() {
  close();
  conns_.clear();  // joins the writer threads; nobody can reach the connections any more
}

void GlobalClient::close() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (closed_) return;
    closed_ = true;
  }
  for (auto& c : conns_)
    if (c) c->close();  // bye, drain, shut: later posts fail at once
  poller_.stop();
  // Nobody pumps any more: a frame still arriving (maybe into a caller's memory) fails now, so
  // its waiters let go. The connections themselves stay until the destructor, since ops still in
  // flight may post to them.
  for (auto& c : conns_)
    if (c) c->stop_reading();
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& [key, op] : ops_) op->node_lost(Status(Errc::reset, "the node is shutting down"));
    ops_.clear();
    current_.clear();
  }
  if (session_) session_->leave();
  session_.reset();
  if (system_) {
    system_->await_all_actors_done();
    system_.reset();
  }
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

Status GlobalClient::lost() const {
  std::lock_guard<std::mutex> lk(mu_);
  return lost_;
}

std::shared_ptr<NetOp> GlobalClient::op_for(uint32_t group, uint64_t seq, bool create) {
  std::lock_guard<std::mutex> lk(mu_);
  const auto key = std::make_pair(group, seq);
  auto it = ops_.find(key);
  if (it != ops_.end()) return it->second;
  if (!create || closed_ || done_.count(key)) return nullptr;
  auto op = std::make_shared<NetOp>(shared_from_this(), group, seq, topo_.num_nodes);
  if (!lost_) op->node_lost(lost_);
  for (auto& [node, why] : left_) op->node_left(node, why);
  ops_.emplace(key, op);
  return op;
}

void GlobalClient::finished(uint32_t group, uint64_t seq) {
  std::lock_guard<std::mutex> lk(mu_);
  const auto key = std::make_pair(group, seq);
  ops_.erase(key);
  if (done_.insert(key).second) done_order_.push_back(key);
  if (done_order_.size() > 4096) {  // remember enough recent ops to drop their late frames
    for (std::size_t i = 0; i < 2048; ++i) done_.erase(done_order_[i]);
    done_order_.erase(done_order_.begin(), done_order_.begin() + 2048);
  }
}

std::vector<uint32_t> GlobalClient::rank_nodes(const std::vector<uint32_t>& members) const {
  std::vector<uint32_t> rank_node;
  if (members.empty())
    for (uint32_t r = 0; r < total_peers(); ++r) rank_node.push_back(node_of(r));
  else
    for (uint32_t m : members) rank_node.push_back(node_of(m));
  return rank_node;
}

std::shared_ptr<RemoteSteps> GlobalClient::begin_op(uint32_t group, uint64_t seq, OpAnnouncement mine,
                                                    Clock::time_point deadline, std::string label,
                                                    std::vector<uint32_t> rank_node, uint32_t local_members,
                                                    const std::vector<bool>& reached) {
  auto op = op_for(group, seq, true);
  if (!op) {  // closing, or a sequence number reused
    op = std::make_shared<NetOp>(shared_from_this(), group, seq, topo_.num_nodes);
    op->node_lost(Status(Errc::reset, label + ": the node is shutting down"));
  }
  std::vector<bool> seen(topo_.num_nodes, false);
  std::vector<uint32_t> tell;
  for (uint32_t n : rank_node)
    if (n != topo_.node_id && !seen[n]) {
      seen[n] = true;
      if (!(n < reached.size() && reached[n]) || !mine.status.is_ok()) tell.push_back(n);
    }
  mine.node = topo_.node_id;
  FrameHeader h;
  h.type = FrameType::announce;
  h.group = group;
  h.seq = seq;
  std::string body = encode_announcement(mine);
  const bool failed = !mine.status.is_ok();
  op->launch(std::move(mine), deadline, std::move(label), local_members, std::move(rank_node), h, std::move(body),
             std::move(tell));
  // Our peers will not run this op: the others must hear why at once.
  if (failed) op->flush();
  return op;
}

void GlobalClient::on_node_lost(uint32_t node, const std::string& why) {
  std::vector<std::shared_ptr<NetOp>> ops;
  Status s;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (lost_) lost_ = Status(Errc::node_lost, why);
    s = lost_;
    for (auto& [k, op] : ops_) ops.push_back(op);
  }
  (void)node;
  for (auto& op : ops) op->node_lost(s);
  {
    std::lock_guard<std::mutex> lk(p2p_->mu);
    if (!p2p_->lost) p2p_->lost = s;
  }
  p2p_->word.set(std::numeric_limits<uint32_t>::max());
}

void GlobalClient::cut_off(uint32_t node, const std::string& why) {
  on_node_lost(node, why);
  conns_[node]->kill();
}

bool GlobalClient::await_sent(SendTicket& t, uint32_t node, Clock::time_point deadline) {
  // Reading goes on meanwhile (we may lead the poller): the other side may be waiting to send us
  // its data before it reads ours.
  if (!poller_.wait(t.done, 1, deadline)) {
    cut_off(node, "node " + std::to_string(node) + " took no data for the whole timeout (frozen?)");
    t.done.wait_at_least(1, Clock::now() + kGrace);
  }
  return t.done.value.load() == 1;
}

std::byte* GlobalClient::begin_frame(uint32_t node, const FrameHeader& h) {
  switch (h.type) {
    case FrameType::data: {
      current_[node] = op_for(h.group, h.seq, true);
      current_slot_[node] = h.slot;
      return current_[node] ? current_[node]->incoming_frame(node, h) : nullptr;
    }
    case FrameType::p2p_data: {
      if (h.slot > h.bytes || h.slot > (1u << 20)) return nullptr;  // garbled: dropped
      auto& frame = p2p_->frames[node];
      frame.resize(h.bytes);
      return reinterpret_cast<std::byte*>(frame.data());
    }
    case FrameType::announce:
    case FrameType::p2p_ack: {
      if (h.bytes > std::size_t{1} << 20) return nullptr;
      scratch_[node].resize(h.bytes);
      return reinterpret_cast<std::byte*>(scratch_[node].data());
    }
    default: return nullptr;
  }
}

void GlobalClient::progress(uint32_t node, const FrameHeader& h, std::size_t got) {
  if (h.type == FrameType::data) {
    if (current_[node]) current_[node]->incoming_progress(current_slot_[node], got);
    return;
  }
  if (got < h.bytes) return;
  std::string error;
  switch (h.type) {
    case FrameType::announce: {
      // Its own announcement, or another node's that it forwards.
      auto a = decode_announcement(scratch_[node].data(), scratch_[node].size(), error);
      if (!a || a->node >= topo_.num_nodes || a->node == topo_.node_id)
        return on_node_lost(node, "node " + std::to_string(node) + " sent a garbled announcement" +
                                      (a ? " (naming node " + std::to_string(a->node) + ")" : ": " + error));
      if (auto op = op_for(h.group, h.seq, true)) op->announced(*a, h, scratch_[node]);
      return;
    }
    case FrameType::p2p_data: {
      auto& frame = p2p_->frames[node];
      auto head = decode_p2p_header(frame.data(), h.slot, error);
      if (!head) return on_node_lost(node, "node " + std::to_string(node) + " sent a garbled send header");
      P2PMailbox::Message m{head->dtype, head->numel, std::move(frame), h.slot, head->failed};
      frame = std::string();
      {
        std::lock_guard<std::mutex> lk(p2p_->mu);
        p2p_->inbox[{head->source, head->destination, head->tag}].push_back(std::move(m));
      }
      p2p_->bump();
      return;
    }
    case FrameType::p2p_ack: {
      auto ack = decode_p2p_ack(scratch_[node].data(), scratch_[node].size(), error);
      if (!ack) return on_node_lost(node, "node " + std::to_string(node) + " sent a garbled send answer");
      {
        std::lock_guard<std::mutex> lk(p2p_->mu);
        p2p_->acks[{ack->source, ack->destination, ack->tag}].push_back(std::move(ack->status));
      }
      p2p_->bump();
      return;
    }
    default: return;
  }
}

void GlobalClient::frame_failed(uint32_t node, const FrameHeader& h) {
  if (h.type == FrameType::data && current_[node]) current_[node]->incoming_failed(current_slot_[node]);
}

void GlobalClient::closed(uint32_t node, bool orderly, const std::string& why) {
  if (!orderly) return on_node_lost(node, "node " + std::to_string(node) + " lost: " + why);
  // Everything the node sent before its goodbye has arrived: ops that got all they need from it
  // still complete; waits for more from it fail, and so does every later op.
  const Status left(Errc::node_lost, "node " + std::to_string(node) + " left the collective");
  std::vector<std::shared_ptr<NetOp>> ops;
  {
    std::lock_guard<std::mutex> lk(mu_);
    left_.emplace_back(node, left);
    for (auto& [k, op] : ops_) ops.push_back(op);
  }
  for (auto& op : ops) op->node_left(node, left);
  {
    std::lock_guard<std::mutex> lk(p2p_->mu);
    p2p_->gone.emplace(node, left);
  }
  p2p_->bump();
}

// ---- Point to point ----

Status GlobalClient::send(uint32_t src, uint32_t dst, uint64_t tag, const Tensor& t, Clock::time_point deadline,
                          const Status& failed) {
  const uint32_t node = node_of(dst);
  const std::string label = pair_label(src, dst, tag);
  if (auto l = lost(); !l) return l;
  // A sender that cannot send still sends the header, saying why, so the receiver fails with it
  // at once; both sides report the same error.
  const Status why = failed ? Status::ok()
                            : Status(failed.code(), label + ": peer " + std::to_string(src) +
                                                        " could not send its tensor: " + failed.message());
  // One frame: the header (its length in `slot`) and the data, so that concurrent senders on this
  // connection never split a header from its data.
  FrameHeader h;
  h.type = FrameType::p2p_data;
  h.seq = (uint64_t{src} << 32) | dst;
  std::string head = encode_p2p_header(P2PHeaderData{src, dst, tag, t.dtype(), t.numel(), why});
  h.slot = static_cast<uint32_t>(head.size());
  auto ticket = conns_[node]->send(SendTicket::prefixed(h, std::move(head), static_cast<const std::byte*>(why ? t.data() : nullptr),
                                                        why ? t.nbytes() : 0));
  await_sent(*ticket, node, deadline);
  const P2PMailbox::Key key{src, dst, tag};
  for (;;) {
    const uint32_t g = p2p_->word.value.load();
    {
      std::lock_guard<std::mutex> lk(p2p_->mu);
      auto it = p2p_->acks.find(key);
      if (it != p2p_->acks.end() && !it->second.empty()) {
        Status s = std::move(it->second.front());
        it->second.pop_front();
        if (it->second.empty()) p2p_->acks.erase(it);
        return why ? s : why;
      }
      if (p2p_->lost) return *p2p_->lost;
      if (auto gone = p2p_->gone.find(node); gone != p2p_->gone.end()) return gone->second;
    }
    if (!poller_.wait(p2p_->word, g + 1, deadline))
      return {Errc::timeout, label + ": peer " + std::to_string(dst) + " (node " + std::to_string(node) +
                                 ") never posted the matching recv within " + std::to_string(config_.timeout.count()) + " ms"};
  }
}

Status GlobalClient::recv(uint32_t src, uint32_t dst, uint64_t tag, Tensor& t, Clock::time_point deadline) {
  const uint32_t node = node_of(src);
  const std::string label = pair_label(src, dst, tag);
  const P2PMailbox::Key key{src, dst, tag};
  P2PMailbox::Message m;
  for (;;) {
    const uint32_t g = p2p_->word.value.load();
    {
      std::lock_guard<std::mutex> lk(p2p_->mu);
      auto it = p2p_->inbox.find(key);
      if (it != p2p_->inbox.end() && !it->second.empty()) {
        m = std::move(it->second.front());
        it->second.pop_front();
        if (it->second.empty()) p2p_->inbox.erase(it);
        break;
      }
      if (p2p_->lost) return *p2p_->lost;
      if (auto gone = p2p_->gone.find(node); gone != p2p_->gone.end()) return gone->second;
    }
    if (!poller_.wait(p2p_->word, g + 1, deadline))
      return {Errc::timeout, label + ": peer " + std::to_string(src) + " (node " + std::to_string(node) +
                                 ") never posted the matching send within " + std::to_string(config_.timeout.count()) + " ms"};
  }
  Status s;
  const std::string theirs = std::string(to_string(m.dtype)) + "[" + std::to_string(m.numel) + "]";
  const std::string mine = std::string(to_string(t.dtype())) + "[" + std::to_string(t.numel()) + "]";
  if (!m.failed)
    s = m.failed;
  else if (m.dtype != t.dtype())
    s = Status(Errc::dtype_mismatch, label + ": sender has " + theirs + ", receiver " + mine);
  else if (m.numel != t.numel() || m.bytes.size() - m.offset != t.nbytes())
    s = Status(Errc::shape_mismatch, label + ": sender has " + theirs + ", receiver " + mine);
  else
    std::memcpy(t.data(), m.bytes.data() + m.offset, t.nbytes());
  FrameHeader h;
  h.type = FrameType::p2p_ack;
  h.seq = (uint64_t{src} << 32) | dst;
  conns_[node]->send(SendTicket::owning(h, encode_p2p_ack(P2PAckData{src, dst, tag, s})));
  return s;
}

} // namespace chorus
