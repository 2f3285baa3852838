#include "messages/peer_codec.hpp"

#include <capnp/message.h>

#include "chorus.capnp.h"

namespace chorus {

namespace {

template <class To, class From>
To enum_in_range(From v, uint16_t max, const char* what) {
  auto raw = static_cast<uint16_t>(v);
  if (raw > max) throw std::runtime_error(std::string("unknown ") + what + " " + std::to_string(raw));
  return static_cast<To>(raw);
}

// Negative values have no wire form: they go out as 0, which validate() rejects by name.
uint64_t non_negative(int64_t v) { return v < 0 ? 0 : static_cast<uint64_t>(v); }

// Values beyond what any sane config uses are garbled input, not something to clamp silently.
template <class T>
T bounded(uint64_t v, uint64_t max, const char* what) {
  if (v > max) throw std::runtime_error(std::string(what) + " " + std::to_string(v) + " is out of range");
  return static_cast<T>(v);
}

void put_choices(capnp::List<wire::StrategyChoice>::Builder b,
                 const std::array<StrategyChoice, num_collective_kinds>& a) {
  for (std::size_t k = 0; k < a.size(); ++k) {
    b[k].setIsAuto(a[k].is_auto);
    b[k].setAlgorithm(static_cast<wire::Algorithm>(a[k].fixed.algorithm));
    b[k].setArity(static_cast<uint32_t>(non_negative(a[k].fixed.arity)));
  }
}

void get_choices(capnp::List<wire::StrategyChoice>::Reader r,
                 std::array<StrategyChoice, num_collective_kinds>& a) {
  if (r.size() != a.size()) throw std::runtime_error("strategy list has " + std::to_string(r.size()) + " entries");
  for (std::size_t k = 0; k < a.size(); ++k) {
    a[k].is_auto = r[k].getIsAuto();
    a[k].fixed.algorithm = enum_in_range<Algorithm>(r[k].getAlgorithm(), 5, "algorithm");
    a[k].fixed.arity = bounded<int>(r[k].getArity(), 1u << 20, "tree arity");
  }
}

void put_config(wire::Config::Builder b, const Config& c) {
  b.setNumDevices(c.num_devices);
  put_choices(b.initLocalStrategies(num_collective_kinds), c.local);
  b.setAutoThresholdBytes(c.auto_threshold_bytes);
  b.setAutoTreeArity(static_cast<uint32_t>(non_negative(c.auto_tree_arity)));
  b.setTimeoutMs(non_negative(c.timeout.count()));
  b.setNumNodes(c.num_nodes);
  b.setOrchestratorAddress(c.orchestrator_address);
  b.setNodeAddress(c.node_address);
  put_choices(b.initGlobalStrategies(num_collective_kinds), c.global);
  b.setHostTransport(static_cast<uint8_t>(c.host_transport));
  b.setRank(c.rank);
  b.setJoinTimeoutMs(non_negative(c.join_timeout.count()));
  b.setHostOrchestrator(c.host_orchestrator);
  b.setRendezvousFile(c.rendezvous_file);
  b.setElastic(c.elastic);
  b.setSealData(c.seal_data);
}

Config get_config(wire::Config::Reader r) {
  Config c;
  c.num_devices = r.getNumDevices();
  get_choices(r.getLocalStrategies(), c.local);
  c.auto_threshold_bytes = r.getAutoThresholdBytes();
  c.auto_tree_arity = bounded<int>(r.getAutoTreeArity(), 1u << 20, "auto_tree_arity");
  c.timeout = std::chrono::milliseconds(bounded<int64_t>(r.getTimeoutMs(), 1ull << 40, "timeout_ms"));
  c.num_nodes = r.getNumNodes();
  c.orchestrator_address = r.getOrchestratorAddress();
  c.node_address = r.getNodeAddress();
  get_choices(r.getGlobalStrategies(), c.global);
  c.host_transport = enum_in_range<HostTransport>(r.getHostTransport(), 1, "host_transport");
  c.rank = r.getRank();
  c.join_timeout = std::chrono::milliseconds(bounded<int64_t>(r.getJoinTimeoutMs(), 1ull << 40, "join_timeout_ms"));
  c.host_orchestrator = r.getHostOrchestrator();
  c.rendezvous_file = r.getRendezvousFile();
  c.elastic = r.getElastic();
  c.seal_data = r.getSealData();
  return c;
}

} // namespace

uint32_t protocol_version() { return wire::PROTOCOL_VERSION; }

Envelope encode_register(const RegisterData& r) {
  capnp::MallocMessageBuilder mb;
  auto b = mb.initRoot<wire::RegisterRequest>();
  b.setProtocolVersion(r.protocol_version);
  b.setPeerId(r.peer);
  put_config(b.initConfig(), r.config);
  return seal(mb);
}

Envelope encode_peer_only(uint32_t peer, bool reset, uint64_t epoch) {
  capnp::MallocMessageBuilder mb;
  if (reset) {
    mb.initRoot<wire::Reset>().setPeerId(peer);
  } else {
    auto f = mb.initRoot<wire::Finish>();
    f.setPeerId(peer);
    f.setEpoch(epoch);
  }
  return seal(mb);
}

std::optional<RegisterData> decode_register(const Envelope& e, std::string& error) {
  return open_envelope(e, error, [](EnvelopeReader& rd) {
    auto r = rd.root<wire::RegisterRequest>();
    RegisterData d;
    d.protocol_version = r.getProtocolVersion();
    d.peer = r.getPeerId();
    d.config = get_config(r.getConfig());
    return d;
  });
}

std::optional<uint32_t> decode_peer_only(const Envelope& e, bool reset, std::string& error) {
  return open_envelope(e, error, [reset](EnvelopeReader& rd) {
    return reset ? rd.root<wire::Reset>().getPeerId() : rd.root<wire::Finish>().getPeerId();
  });
}

std::optional<FinishData> decode_finish(const Envelope& e, std::string& error) {
  return open_envelope(e, error, [](EnvelopeReader& rd) {
    auto r = rd.root<wire::Finish>();
    return FinishData{r.getPeerId(), r.getEpoch()};
  });
}

} // namespace chorus
