#include "actors/global_client/announcements.hpp"

#include <capnp/message.h>

#include <cstring>

#include "actors/local_server/op_validation.hpp"
#include "chorus.capnp.h"
#include "messages/envelope.hpp"

namespace chorus {

std::string OpAnnouncement::describe() const {
  std::string s(to_string(kind));
  if (kind == OpKind::barrier) return s;
  if (reduces(kind)) s += " " + std::string(to_string(redop));
  std::string dims;
  for (std::size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  s += " of " + std::string(to_string(dtype)) + "[" + dims + "]";
  if (rooted(kind)) s += " root " + std::to_string(root);
  return s;
}

std::string envelope_bytes(const Envelope& e) {
  return std::string(reinterpret_cast<const char*>(e.words.data()), e.words.size() * sizeof(uint64_t));
}

bool bytes_envelope(const void* data, std::size_t bytes, Envelope& e) {
  if (bytes % sizeof(uint64_t) != 0) return false;
  e.words.resize(bytes / sizeof(uint64_t));
  std::memcpy(e.words.data(), data, bytes);
  return true;
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
  return envelope_bytes(seal(mb));
}

std::optional<OpAnnouncement> decode_announcement(const void* data, std::size_t bytes, std::string& error) {
  Envelope e;
  if (!bytes_envelope(data, bytes, e)) {
    error = "garbled announcement: not a whole number of words";
    return std::nullopt;
  }
  return open_envelope(e, error, [](EnvelopeReader& r) {
    auto m = r.root<wire::OpAnnounce>();
    OpAnnouncement a;
    a.node = m.getNodeId();
    if (m.getKind() > static_cast<uint8_t>(OpKind::recv) || m.getDtype() > static_cast<uint8_t>(DType::i64) ||
        m.getRedop() > static_cast<uint8_t>(ReduceOp::bxor) || m.getStatusCode() > static_cast<uint16_t>(last_errc))
      throw std::runtime_error("announcement field out of range");
    a.kind = static_cast<OpKind>(m.getKind());
    a.dtype = static_cast<DType>(m.getDtype());
    a.redop = static_cast<ReduceOp>(m.getRedop());
    a.root = m.getRoot();
    a.count = m.getCount();
    for (auto d : m.getShape()) a.shape.push_back(d);
    a.status = Status(static_cast<Errc>(m.getStatusCode()), m.getStatusMessage());
    return a;
  });
}

Status node_failure(const OpAnnouncement& a, uint64_t seq) {
  return {a.status.code(), op_label(a.kind, seq) + ": node " + std::to_string(a.node) + ": " + a.status.message()};
}

Status compare_announcements(const OpAnnouncement& f, const OpAnnouncement& o, uint64_t seq) {
  Errc code = Errc::ok;
  if (f.kind != o.kind) code = Errc::op_mismatch;
  else if (rooted(f.kind) && f.root != o.root) code = Errc::root_mismatch;
  else if (reduces(f.kind) && f.redop != o.redop) code = Errc::reduce_op_mismatch;
  else if (f.kind != OpKind::barrier && f.dtype != o.dtype) code = Errc::dtype_mismatch;
  else if (f.kind != OpKind::barrier && (f.count != o.count || f.shape != o.shape)) code = Errc::shape_mismatch;
  if (code == Errc::ok) return Status::ok();
  return {code, op_label(f.kind, seq) + ": node " + std::to_string(f.node) + " calls " + f.describe() +
                    " but node " + std::to_string(o.node) + " calls " + o.describe()};
}

Status judge_announcements(const std::vector<OpAnnouncement>& all, uint64_t seq) {
  for (const auto& a : all)
    if (!a.status) return node_failure(a, seq);
  for (std::size_t k = 1; k < all.size(); ++k)
    if (auto s = compare_announcements(all[0], all[k], seq); !s) return s;
  return Status::ok();
}

} // namespace chorus
