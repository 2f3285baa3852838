#include "mesh/data_hello.hpp"

#include "messages/data_codec.hpp"
#include "messages/peer_codec.hpp"
#include "transport/frame.hpp"

namespace chorus {

// The hello travels inside the TLS session when there is one.
Status send_hello(int fd, TlsChannel* tls, const TopologyData& t, Clock::time_point deadline) {
  FrameHeader h;
  h.type = FrameType::hello;
  const std::string frame = whole_frame(h, encode_data_hello({protocol_version(), t.collective, t.node_id, t.token}));
  return TlsChannel::write_all(fd, tls, frame.data(), frame.size(), deadline);
}

// Reads one hello frame and checks it belongs to this collective; returns the sender's node id.
Status read_hello(int fd, TlsChannel* tls, const TopologyData& t, Clock::time_point deadline, uint32_t& node) {
  auto read = [&](void* p, std::size_t n) { return TlsChannel::read_exact(fd, tls, p, n, deadline); };
  FrameHeader h;
  if (auto s = read(&h, sizeof h); !s.is_ok()) return s;
  if (h.magic != FrameHeader::kMagic || h.type != FrameType::hello || h.bytes > 4096)
    return {Errc::invalid_argument, "garbled hello frame"};
  std::string body(h.bytes, '\0');
  if (auto s = read(body.data(), body.size()); !s.is_ok()) return s;
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

} // namespace chorus
