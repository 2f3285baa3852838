#include "messages/data_codec.hpp"

#include <capnp/message.h>

#include <stdexcept>

#include "chorus.capnp.h"
#include "messages/envelope.hpp"

namespace chorus {

namespace {

// An announcement names at most one GPU per peer of its node (Config::kMaxDevices), and an NCCL
// unique id is NCCL_UNIQUE_ID_BYTES long.
constexpr std::size_t kMaxAnnouncedDevices = 4096;
constexpr std::size_t kNcclIdSize = 128;

// A Status from its wire form (code 0: ok, whatever the text); an unknown code is garbled input.
Status status_from(uint16_t code, capnp::Text::Reader message) {
  if (code > static_cast<uint16_t>(last_errc)) throw std::runtime_error("unknown error code " + std::to_string(code));
  if (code == 0) return Status::ok();
  return Status(static_cast<Errc>(code), message.cStr());
}

DType dtype_from(uint8_t raw) {
  if (raw > static_cast<uint8_t>(DType::i64)) throw std::runtime_error("unknown dtype " + std::to_string(raw));
  return static_cast<DType>(raw);
}

// Runs `read` on the message in [data, data + bytes); nullopt with `error` when it is garbled.
template <class F>
auto open_bytes(const void* data, std::size_t bytes, const char* what, std::string& error, F&& read)
    -> decltype(open_envelope(Envelope{}, error, read)) {
  Envelope e;
  if (!bytes_envelope(data, bytes, e)) {
    error = std::string("garbled ") + what + ": not a whole number of words";
    return std::nullopt;
  }
  return open_envelope(e, error, read);
}

} // namespace

std::string encode_data_hello(const DataHello& h) {
  capnp::MallocMessageBuilder mb(32);
  auto b = mb.initRoot<wire::DataHello>();
  b.setProtocolVersion(h.protocol_version);
  b.setCollective(h.collective);
  b.setNodeId(h.node);
  b.setToken(h.token);
  return envelope_bytes(seal(mb));
}

std::optional<DataHello> decode_data_hello(const void* data, std::size_t bytes, std::string& error) {
  return open_bytes(data, bytes, "hello", error, [](EnvelopeReader& r) {
    auto m = r.root<wire::DataHello>();
    return DataHello{m.getProtocolVersion(), m.getCollective(), m.getNodeId(), m.getToken()};
  });
}

std::string encode_announcement(const OpAnnouncement& a) {
  capnp::MallocMessageBuilder mb(64);  // announcements are small: do not zero 8 KiB per op
  auto b = mb.initRoot<wire::OpAnnounce>();
  b.setNodeId(a.node);
  b.setKind(static_cast<uint8_t>(a.kind));
  b.setDtype(static_cast<uint8_t>(a.dtype));
  b.setRedop(static_cast<uint8_t>(a.redop));
  b.setRoot(a.root);
  b.setCount(a.count);
  auto sh = b.initShape(static_cast<unsigned>(a.shape.size()));
  for (std::size_t i = 0; i < a.shape.size(); ++i) sh.set(static_cast<unsigned>(i), a.shape[i]);
  b.setStatusCode(static_cast<uint16_t>(a.status.code()));
  b.setStatusMessage(a.status.message());
  b.setGpu(a.gpu);
  if (!a.devices.empty()) {
    auto d = b.initDevices(static_cast<unsigned>(a.devices.size()));
    for (std::size_t i = 0; i < a.devices.size(); ++i) d.set(static_cast<unsigned>(i), a.devices[i]);
  }
  b.setNcclLive(a.nccl_live);
  b.setNcclLast(a.nccl_last);
  if (!a.nccl_id.empty())
    b.setNcclId(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(a.nccl_id.data()), a.nccl_id.size()));
  b.setTimeoutMs(a.timeout_ms);
  return envelope_bytes(seal(mb));
}

std::optional<OpAnnouncement> decode_announcement(const void* data, std::size_t bytes, std::string& error) {
  return open_bytes(data, bytes, "announcement", error, [](EnvelopeReader& r) {
    auto m = r.root<wire::OpAnnounce>();
    if (m.getKind() > static_cast<uint8_t>(OpKind::recv) || m.getRedop() > static_cast<uint8_t>(ReduceOp::bxor))
      throw std::runtime_error("announcement field out of range");
    OpAnnouncement a;
    a.node = m.getNodeId();
    a.kind = static_cast<OpKind>(m.getKind());
    a.dtype = dtype_from(m.getDtype());
    a.redop = static_cast<ReduceOp>(m.getRedop());
    a.root = m.getRoot();
    a.count = m.getCount();
    for (auto d : m.getShape()) a.shape.push_back(d);
    a.status = status_from(m.getStatusCode(), m.getStatusMessage());
    a.gpu = m.getGpu();
    if (m.getDevices().size() > kMaxAnnouncedDevices || (m.getNcclId().size() != 0 && m.getNcclId().size() != kNcclIdSize))
      throw std::runtime_error("announcement's GPU fields out of range");
    for (auto d : m.getDevices()) {
      if (d < 0) throw std::runtime_error("announcement names a negative GPU");
      a.devices.push_back(d);
    }
    a.nccl_live = m.getNcclLive();
    a.nccl_last = m.getNcclLast();
    auto id = m.getNcclId();
    a.nccl_id.assign(reinterpret_cast<const char*>(id.begin()), id.size());
    a.timeout_ms = m.getTimeoutMs();
    return a;
  });
}

std::string encode_p2p_header(const P2PHeaderData& h) {
  capnp::MallocMessageBuilder mb(64);
  auto b = mb.initRoot<wire::P2PHeader>();
  b.setSource(h.source);
  b.setDestination(h.destination);
  b.setTag(h.tag);
  b.setDtype(static_cast<uint8_t>(h.dtype));
  b.setNumel(h.numel);
  b.setId(h.id);
  b.setPulled(h.pulled);
  if (!h.failed.is_ok()) {
    b.setFailedCode(static_cast<uint16_t>(h.failed.code()));
    b.setFailure(h.failed.message());
  }
  return envelope_bytes(seal(mb));
}

std::optional<P2PHeaderData> decode_p2p_header(const void* data, std::size_t bytes, std::string& error) {
  return open_bytes(data, bytes, "send header", error, [](EnvelopeReader& r) {
    auto m = r.root<wire::P2PHeader>();
    P2PHeaderData h;
    h.source = m.getSource();
    h.destination = m.getDestination();
    h.tag = m.getTag();
    h.dtype = dtype_from(m.getDtype());
    h.numel = m.getNumel();
    h.failed = status_from(m.getFailedCode(), m.getFailure());
    h.id = m.getId();
    h.pulled = m.getPulled();
    return h;
  });
}

std::string encode_p2p_ack(const P2PAckData& a) {
  capnp::MallocMessageBuilder mb(64);
  auto b = mb.initRoot<wire::P2PAck>();
  b.setSource(a.source);
  b.setDestination(a.destination);
  b.setTag(a.tag);
  b.setId(a.id);
  b.setStatusCode(static_cast<uint16_t>(a.status.code()));
  b.setStatusMessage(a.status.message());
  return envelope_bytes(seal(mb));
}

std::optional<P2PAckData> decode_p2p_ack(const void* data, std::size_t bytes, std::string& error) {
  return open_bytes(data, bytes, "send answer", error, [](EnvelopeReader& r) {
    auto m = r.root<wire::P2PAck>();
    return P2PAckData{m.getSource(), m.getDestination(), m.getTag(),
                      status_from(m.getStatusCode(), m.getStatusMessage()), m.getId()};
  });
}

std::string encode_stragglers(const std::vector<uint32_t>& ranks) {
  capnp::MallocMessageBuilder mb(64);
  auto l = mb.initRoot<wire::Stragglers>().initRanks(static_cast<unsigned>(ranks.size()));
  for (unsigned i = 0; i < ranks.size(); ++i) l.set(i, ranks[i]);
  return envelope_bytes(seal(mb));
}

std::optional<std::vector<uint32_t>> decode_stragglers(const void* data, std::size_t bytes, std::string& error) {
  return open_bytes(data, bytes, "straggler note", error, [](EnvelopeReader& r) {
    std::vector<uint32_t> ranks;
    for (uint32_t k : r.root<wire::Stragglers>().getRanks()) ranks.push_back(k);
    return ranks;
  });
}

std::string encode_leaving(const Status& why) {
  capnp::MallocMessageBuilder mb(64);
  auto b = mb.initRoot<wire::Leaving>();
  b.setCode(static_cast<uint16_t>(why.code()));
  b.setMessage(why.message());
  return envelope_bytes(seal(mb));
}

std::optional<Status> decode_leaving(const void* data, std::size_t bytes, std::string& error) {
  return open_bytes(data, bytes, "leaving note", error, [](EnvelopeReader& r) {
    auto m = r.root<wire::Leaving>();
    return status_from(m.getCode(), m.getMessage());
  });
}

} // namespace chorus
