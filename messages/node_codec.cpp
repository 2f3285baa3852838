#include "messages/node_codec.hpp"

#include <capnp/message.h>

#include "chorus.capnp.h"
#include "messages/peer_codec.hpp"

namespace chorus {

std::string_view to_string(RejoinData::Kind k) {
  switch (k) {
    case RejoinData::Kind::none: return "register";
    case RejoinData::Kind::shrink: return "shrink";
    case RejoinData::Kind::grow: return "grow";
  }
  return "unknown";
}

Envelope encode_node_register(const NodeRegisterData& r) {
  // The Config codec lives in messages/peer_codec.cpp: borrow it through a RegisterRequest and copy the
  // struct over (Cap'n Proto copies a struct reader into a builder field).
  Envelope reg = encode_register({r.protocol_version, 0, r.config});
  EnvelopeReader rr(reg);
  capnp::MallocMessageBuilder mb;
  auto b = mb.initRoot<wire::NodeRegister>();
  b.setProtocolVersion(r.protocol_version);
  // r.secret is not written: the front door checked it without it crossing the wire.
  b.setConfig(rr.root<wire::RegisterRequest>().getConfig());
  b.setNumPeers(r.num_peers);
  b.setDataAddress(r.data_address);
  b.setHardwareThreads(r.hardware_threads);
  b.setHostKey(r.host_key);
  b.setGpus(r.gpus);
  b.setRank(r.rank);
  b.setNewcomer(r.newcomer);
  if (r.rejoin.kind != RejoinData::Kind::none) {
    auto j = b.initRejoin();
    j.setKind(static_cast<uint8_t>(r.rejoin.kind));
    j.setCollective(r.rejoin.collective);
    j.setNodeId(r.rejoin.node_id);
    j.setTicket(r.rejoin.ticket);
    auto ex = j.initExclude(static_cast<unsigned>(r.rejoin.exclude.size()));
    for (unsigned i = 0; i < ex.size(); ++i) ex.set(i, r.rejoin.exclude[i]);
    auto un = j.initUnkept(static_cast<unsigned>(r.rejoin.unkept.size()));
    for (unsigned i = 0; i < un.size(); ++i) un.set(i, r.rejoin.unkept[i]);
  }
  return seal(mb);
}

std::optional<NodeRegisterData> decode_node_register(const Envelope& e, std::string& error) {
  auto partial = open_envelope(e, error, [](EnvelopeReader& r) {
    auto m = r.root<wire::NodeRegister>();
    NodeRegisterData d;
    d.protocol_version = m.getProtocolVersion();
    d.num_peers = m.getNumPeers();
    d.data_address = m.getDataAddress();
    d.hardware_threads = m.getHardwareThreads();
    d.host_key = m.getHostKey();
    d.gpus = m.getGpus();
    d.rank = m.getRank();
    d.newcomer = m.getNewcomer();
    if (m.hasRejoin()) {
      auto j = m.getRejoin();
      if (j.getKind() > static_cast<uint8_t>(RejoinData::Kind::grow))
        throw std::runtime_error("unknown rejoin kind " + std::to_string(j.getKind()));
      d.rejoin.kind = static_cast<RejoinData::Kind>(j.getKind());
      d.rejoin.collective = j.getCollective();
      d.rejoin.node_id = j.getNodeId();
      d.rejoin.ticket = j.getTicket();
      for (uint32_t id : j.getExclude()) {
        if (!d.rejoin.exclude.empty() && id <= d.rejoin.exclude.back())
          throw std::runtime_error("rejoin exclude list not ascending");
        d.rejoin.exclude.push_back(id);
      }
      for (uint32_t id : j.getUnkept()) {
        if (!d.rejoin.unkept.empty() && id <= d.rejoin.unkept.back())
          throw std::runtime_error("rejoin unkept list not ascending");
        d.rejoin.unkept.push_back(id);
      }
    }
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
    tb.setEpoch(t.epoch);
    tb.setTicket(t.ticket);
    auto prev = tb.initPrevious(static_cast<unsigned>(t.previous.size()));
    for (unsigned i = 0; i < prev.size(); ++i) prev.set(i, t.previous[i]);
    auto rl = tb.initRelink(static_cast<unsigned>(t.relink.size()));
    for (unsigned i = 0; i < rl.size(); ++i) rl.set(i, t.relink[i]);
    auto nodes = tb.initNodes(static_cast<unsigned>(t.nodes.size()));
    for (std::size_t i = 0; i < t.nodes.size(); ++i) {
      nodes[i].setNumPeers(t.nodes[i].num_peers);
      nodes[i].setPeerOffset(t.nodes[i].peer_offset);
      nodes[i].setDataAddress(t.nodes[i].data_address);
      nodes[i].setHardwareThreads(t.nodes[i].hardware_threads);
      nodes[i].setHost(t.nodes[i].host);
      nodes[i].setGpus(t.nodes[i].gpus);
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
      d.topology.epoch = t.getEpoch();
      d.topology.ticket = t.getTicket();
      for (int32_t p : t.getPrevious()) d.topology.previous.push_back(p);
      if (!d.topology.previous.empty() && d.topology.previous.size() != t.getNumNodes())
        throw std::runtime_error("inconsistent topology (previous ids)");
      for (uint32_t id : t.getRelink()) {
        if (id >= t.getNumNodes() || id == t.getNodeId() || (!d.topology.relink.empty() && id <= d.topology.relink.back()))
          throw std::runtime_error("inconsistent topology (links to remake)");
        d.topology.relink.push_back(id);
      }
      for (auto n : t.getNodes())
        d.topology.nodes.push_back({n.getNumPeers(), n.getPeerOffset(), n.getDataAddress(), n.getHardwareThreads(),
                                    n.getHost(), n.getGpus()});
      if (d.topology.nodes.size() != d.topology.num_nodes || d.topology.node_id >= d.topology.num_nodes)
        throw std::runtime_error("inconsistent topology");
      for (const auto& n : d.topology.nodes)
        if (n.host >= d.topology.num_nodes) throw std::runtime_error("inconsistent topology (host number)");
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

} // namespace chorus
