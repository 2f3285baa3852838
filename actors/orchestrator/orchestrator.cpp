#include "actors/orchestrator/orchestrator.hpp"

#include <random>

#include <capnp/message.h>

#include <memory>

#include "chorus.capnp.h"
#include "messages/peer_codec.hpp"

namespace chorus {

// ---- Codecs ----

Envelope encode_node_register(const NodeRegisterData& r) {
  // The Config codec lives in messages/peer_codec.cpp: borrow it through a RegisterRequest and copy the
  // struct over (Cap'n Proto copies a struct reader into a builder field).
  Envelope reg = encode_register({r.protocol_version, 0, r.config});
  EnvelopeReader rr(reg);
  capnp::MallocMessageBuilder mb;
  auto b = mb.initRoot<wire::NodeRegister>();
  b.setProtocolVersion(r.protocol_version);
  b.setSecret(r.secret);
  b.setConfig(rr.root<wire::RegisterRequest>().getConfig());
  b.setNumPeers(r.num_peers);
  b.setDataAddress(r.data_address);
  b.setHardwareThreads(r.hardware_threads);
  return seal(mb);
}

std::optional<NodeRegisterData> decode_node_register(const Envelope& e, std::string& error) {
  auto partial = open_envelope(e, error, [](EnvelopeReader& r) {
    auto m = r.root<wire::NodeRegister>();
    NodeRegisterData d;
    d.protocol_version = m.getProtocolVersion();
    d.secret = m.getSecret();
    d.num_peers = m.getNumPeers();
    d.data_address = m.getDataAddress();
    d.hardware_threads = m.getHardwareThreads();
    capnp::MallocMessageBuilder mb;
    auto b = mb.initRoot<wire::RegisterRequest>();
    b.setProtocolVersion(d.protocol_version);
    b.setConfig(m.getConfig());
    return std::make_pair(std::move(d), seal(mb));
  });
  if (!partial) return std::nullopt;
  auto reg = decode_register(partial->second, error);
  if (!reg) return std::nullopt;
  partial->first.config = std::move(reg->config);
  return std::move(partial->first);
}

Envelope encode_node_register_reply(const Status& s, const TopologyData& t) {
  capnp::MallocMessageBuilder mb;
  auto b = mb.initRoot<wire::NodeRegisterReply>();
  b.setCode(static_cast<uint16_t>(s.code()));
  b.setMessage(s.message());
  if (s.is_ok()) {
    auto tb = b.initTopology();
    tb.setCollective(t.collective);
    tb.setNodeId(t.node_id);
    tb.setNumNodes(t.num_nodes);
    tb.setTotalPeers(t.total_peers);
    tb.setToken(t.token);
    auto nodes = tb.initNodes(static_cast<unsigned>(t.nodes.size()));
    for (std::size_t i = 0; i < t.nodes.size(); ++i) {
      nodes[i].setNumPeers(t.nodes[i].num_peers);
      nodes[i].setPeerOffset(t.nodes[i].peer_offset);
      nodes[i].setDataAddress(t.nodes[i].data_address);
      nodes[i].setHardwareThreads(t.nodes[i].hardware_threads);
    }
  }
  return seal(mb);
}

std::optional<NodeRegisterReplyData> decode_node_register_reply(const Envelope& e, std::string& error) {
  return open_envelope(e, error, [](EnvelopeReader& r) {
    auto m = r.root<wire::NodeRegisterReply>();
    NodeRegisterReplyData d;
    auto code = m.getCode();
    if (code > static_cast<uint16_t>(last_errc))
      throw std::runtime_error("unknown error code " + std::to_string(code));
    d.status = Status(static_cast<Errc>(code), m.getMessage());
    if (d.status.is_ok()) {
      auto t = m.getTopology();
      d.topology.collective = t.getCollective();
      d.topology.node_id = t.getNodeId();
      d.topology.num_nodes = t.getNumNodes();
      d.topology.total_peers = t.getTotalPeers();
      d.topology.token = t.getToken();
      for (auto n : t.getNodes())
        d.topology.nodes.push_back({n.getNumPeers(), n.getPeerOffset(), n.getDataAddress(), n.getHardwareThreads()});
      if (d.topology.nodes.size() != d.topology.num_nodes || d.topology.node_id >= d.topology.num_nodes)
        throw std::runtime_error("inconsistent topology");
    }
    return d;
  });
}

Envelope encode_node_leave(const NodeLeaveData& l) {
  capnp::MallocMessageBuilder mb;
  auto b = mb.initRoot<wire::NodeLeave>();
  b.setCollective(l.collective);
  b.setNodeId(l.node_id);
  return seal(mb);
}

std::optional<NodeLeaveData> decode_node_leave(const Envelope& e, std::string& error) {
  return open_envelope(e, error, [](EnvelopeReader& r) {
    auto m = r.root<wire::NodeLeave>();
    return NodeLeaveData{m.getCollective(), m.getNodeId()};
  });
}

Envelope encode_node_lost(const NodeLostData& l) {
  capnp::MallocMessageBuilder mb;
  auto b = mb.initRoot<wire::NodeLost>();
  b.setCollective(l.collective);
  b.setNodeId(l.node_id);
  b.setReason(l.reason);
  return seal(mb);
}

std::optional<NodeLostData> decode_node_lost(const Envelope& e, std::string& error) {
  return open_envelope(e, error, [](EnvelopeReader& r) {
    auto m = r.root<wire::NodeLost>();
    return NodeLostData{m.getCollective(), m.getNodeId(), m.getReason()};
  });
}

// ---- The core ----

Config node_independent(const Config& c) {
  Config n = c;
  n.num_devices = 1;
  n.node_address.clear();
  n.orchestrator_address.clear();
  return n;
}

OrchestratorCore::OrchestratorCore(Options o) : opts_(std::move(o)) {}

int OrchestratorCore::index_of(NodeKey who) const {
  for (std::size_t i = 0; i < members_.size(); ++i)
    if (members_[i].key == who) return static_cast<int>(i);
  return -1;
}

Status OrchestratorCore::check(NodeKey who, const NodeRegisterData& r) const {
  if (r.protocol_version != protocol_version())
    return {Errc::version_mismatch, "protocol version " + std::to_string(r.protocol_version) +
                                        " is not the orchestrator's " + std::to_string(protocol_version())};
  if (r.secret != opts_.secret) return {Errc::auth_failed, "wrong secret"};
  if (complete_)
    return {Errc::busy, "collective " + std::to_string(collective_) +
                                        " is complete and running; register once its nodes have left"};
  if (index_of(who) >= 0) return {Errc::register_twice, "this node is already registered"};
  if (r.num_peers == 0) return {Errc::invalid_argument, "num_peers is 0; a node hosts at least 1 peer"};
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
  return Status::ok();
}

OrchestratorCore::Effects OrchestratorCore::on_register(NodeKey who, const NodeRegisterData& r) {
  Effects fx;
  if (auto s = check(who, r); !s) {
    fx.replies.push_back({who, std::move(s), {}});
    return fx;
  }
  if (members_.empty()) {
    config_ = node_independent(r.config);
    admission_timer_ = next_timer_++;
    fx.timer = std::make_pair(admission_timer_, opts_.timeout);
  }
  members_.push_back({who, r.num_peers, r.data_address, r.hardware_threads});
  fx.watch.push_back(who);
  if (members_.size() == opts_.expected_nodes) finish_admission(fx);
  return fx;
}

OrchestratorCore::Effects OrchestratorCore::on_garbled(NodeKey who, const std::string& error) {
  Effects fx;
  fx.replies.push_back({who, Status(Errc::invalid_argument, error), {}});
  return fx;
}

void OrchestratorCore::finish_admission(Effects& fx) {
  complete_ = true;
  admission_timer_ = 0;
  TopologyData t;
  t.collective = collective_;
  t.token = opts_.token_source ? opts_.token_source() : 0;
  t.num_nodes = static_cast<uint32_t>(members_.size());
  for (const auto& m : members_) {
    t.nodes.push_back({m.num_peers, t.total_peers, m.data_address, m.hardware_threads});
    t.total_peers += m.num_peers;
  }
  for (std::size_t i = 0; i < members_.size(); ++i) {
    t.node_id = static_cast<uint32_t>(i);
    fx.replies.push_back({members_[i].key, Status::ok(), t});
  }
}

void OrchestratorCore::reset(Effects& fx) {
  for (const auto& m : members_)
    if (!m.left) fx.forget.push_back(m.key);
  members_.clear();
  config_.reset();
  complete_ = false;
  admission_timer_ = 0;
  ++collective_;
}

void OrchestratorCore::maybe_next_collective(Effects& fx) {
  for (const auto& m : members_)
    if (!m.left) return;
  reset(fx);
}

OrchestratorCore::Effects OrchestratorCore::on_leave(NodeKey who) {
  Effects fx;
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
  return fx;
}

OrchestratorCore::Effects OrchestratorCore::on_down(NodeKey who, const std::string& reason) {
  Effects fx;
  int i = index_of(who);
  if (i < 0 || members_[i].left) return fx;
  if (!complete_) {
    members_.erase(members_.begin() + i);  // frees its slot; the others keep waiting
    fx.forget.push_back(who);
    if (members_.empty()) reset(fx);
    return fx;
  }
  members_[i].left = true;
  fx.forget.push_back(who);
  NodeLostData lost{collective_, static_cast<uint32_t>(i), reason};
  lost_.push_back(lost);
  for (const auto& m : members_)
    if (!m.left) fx.notices.push_back({m.key, lost});
  maybe_next_collective(fx);
  return fx;
}

OrchestratorCore::Effects OrchestratorCore::on_timeout(uint64_t timer) {
  Effects fx;
  if (timer == 0 || timer != admission_timer_ || complete_) return fx;  // stale tick
  Status why(Errc::timeout, "collective " + std::to_string(collective_) + ": only " +
                                std::to_string(members_.size()) + " of " + std::to_string(opts_.expected_nodes) +
                                " nodes registered within " + std::to_string(opts_.timeout.count()) + " ms");
  for (const auto& m : members_) fx.replies.push_back({m.key, why, {}});
  reset(fx);
  return fx;
}

// ---- The actor shell ----

namespace {
struct ShellState {
  explicit ShellState(OrchestratorCore::Options o) : core(with_random_tokens(std::move(o))) {}
  static OrchestratorCore::Options with_random_tokens(OrchestratorCore::Options o) {
    if (!o.token_source)
      o.token_source = [rng = std::make_shared<std::mt19937_64>(std::random_device{}())] { return (*rng)(); };
    return o;
  }
  OrchestratorCore core;
  uint64_t next_key = 1;
  std::map<caf::actor_addr, OrchestratorCore::NodeKey> keys;
  struct Node {
    caf::actor handle;
    std::optional<caf::response_promise> pending;
    std::optional<Envelope> answered;  // the topology it was sent (a resend gets it again)
  };
  std::map<OrchestratorCore::NodeKey, Node> nodes;
};

void apply(caf::event_based_actor* self, ShellState& st, OrchestratorCore::Effects fx) {
  for (auto k : fx.watch) {
    auto it = st.nodes.find(k);
    if (it != st.nodes.end()) self->monitor(it->second.handle);
  }
  for (auto& r : fx.replies) {
    auto it = st.nodes.find(r.to);
    if (it == st.nodes.end() || !it->second.pending) continue;
    auto reply = encode_node_register_reply(r.status, r.topology);
    if (r.status) it->second.answered = reply;
    it->second.pending->deliver(std::move(reply));
    it->second.pending.reset();
  }
  for (auto& n : fx.notices) {
    auto it = st.nodes.find(n.to);
    if (it != st.nodes.end()) self->send(it->second.handle, node_lost_atom::value, encode_node_lost(n.lost));
  }
  for (auto k : fx.forget) {
    auto it = st.nodes.find(k);
    if (it == st.nodes.end()) continue;
    self->demonitor(it->second.handle);
    st.keys.erase(it->second.handle.address());
    st.nodes.erase(it);
  }
  if (fx.timer)
    self->delayed_send(self, fx.timer->second, timeout_atom::value, fx.timer->first);
}
} // namespace

caf::behavior orchestrator(caf::event_based_actor* self, OrchestratorCore::Options opts) {
  auto st = std::make_shared<ShellState>(std::move(opts));
  self->set_down_handler([self, st](caf::down_msg& dm) {
    auto it = st->keys.find(dm.source);
    if (it == st->keys.end()) return;
    apply(self, *st, st->core.on_down(it->second, "node lost: " + caf::to_string(dm.reason)));
  });
  // A key per distinct sender actor; a non-member's entry only lives while it waits for a reply.
  auto key_of = [self, st]() -> std::optional<OrchestratorCore::NodeKey> {
    auto sender = caf::actor_cast<caf::actor>(self->current_sender());
    if (!sender) return std::nullopt;
    auto [it, fresh] = st->keys.emplace(sender.address(), 0);
    if (fresh) {
      it->second = st->next_key++;
      st->nodes[it->second].handle = sender;
    }
    return it->second;
  };
  return {
      [self, st, key_of](register_atom, const Envelope& e) -> caf::result<Envelope> {
        auto key = key_of();
        if (!key) return encode_node_register_reply({Errc::invalid_argument, "anonymous register request"});
        // Nodes resend their request until answered (a request or reply may get lost when many
        // connect at once): a repeat while the first waits is told so, a repeat after the answer
        // gets the answer again.
        if (st->nodes[*key].pending) return encode_node_register_reply({Errc::register_twice, kSuperseded});
        if (st->nodes[*key].answered) return *st->nodes[*key].answered;
        auto rp = self->make_response_promise<Envelope>();
        st->nodes[*key].pending = rp;
        std::string error;
        auto d = decode_node_register(e, error);
        apply(self, *st, d ? st->core.on_register(*key, *d) : st->core.on_garbled(*key, error));
        // A rejected sender that is no member: drop its bookkeeping (members stay, monitored).
        auto it = st->nodes.find(*key);
        if (it != st->nodes.end() && !it->second.pending && !st->core.is_member(*key)) {
          st->keys.erase(it->second.handle.address());
          st->nodes.erase(it);
        }
        return rp;
      },
      [self, st](node_leave_atom, const Envelope&) {
        auto sender = caf::actor_cast<caf::actor>(self->current_sender());
        if (!sender) return;
        auto it = st->keys.find(sender.address());
        if (it == st->keys.end()) return;
        apply(self, *st, st->core.on_leave(it->second));
      },
      [self, st](timeout_atom, uint64_t timer) { apply(self, *st, st->core.on_timeout(timer)); },
      [st](caf::get_atom) {
        return caf::make_message(st->core.collective(), static_cast<uint64_t>(st->core.registered()),
                                 st->core.complete());
      },
  };
}

} // namespace chorus
