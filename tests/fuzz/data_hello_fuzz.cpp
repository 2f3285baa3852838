// The hello that opens a data connection (mesh/data_hello.cpp, read_hello), as a
// node's data port reads it from whoever connects: the input's first byte chooses plain TCP (even)
// or TLS (odd: a real session, the rest of the input its plaintext); the rest is all the stranger
// sends before it closes. read_hello must answer at once (the stream has ended) with a Status:
// ok only for a hello of this collective (its id and token) from another node of it.
#include "mesh/data_hello.hpp"
#include "fuzz_kit.hpp"
#include "messages/data_codec.hpp"
#include "messages/peer_codec.hpp"
#include "transport/frame.hpp"

using namespace chorus;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 1 || size > (std::size_t{64} << 10)) return 0;
  const bool use_tls = data[0] & 1;
  ++data;
  --size;
  const TopologyData t = fuzz::hello_topology();  // the collective of the seeds' hellos
  std::unique_ptr<fuzz::TlsPair> tls;
  std::unique_ptr<fuzz::SocketPair> plain;
  int fd;
  if (use_tls) {
    tls = std::make_unique<fuzz::TlsPair>();
    const std::string wire = tls->seal(data, size);
    tls->pair.send(wire.data(), wire.size());
    fd = tls->pair.theirs;
  } else {
    plain = std::make_unique<fuzz::SocketPair>();
    plain->send(data, size);
    fd = plain->theirs;
  }
  const auto start = Clock::now();
  uint32_t node = ~0u;
  Status s = read_hello(fd, tls ? tls->server.get() : nullptr, t, start + std::chrono::seconds(5), node);
  FUZZ_CHECK(Clock::now() - start < std::chrono::seconds(4), "read_hello waited on a closed connection");
  FUZZ_CHECK(s.is_ok() || !s.message().empty(), "an error says why");
  if (!s.is_ok()) return 0;
  // Accepted: the stream starts with a hello frame of this collective from another of its nodes.
  FUZZ_CHECK(node < t.num_nodes && node != t.node_id, "accepted a hello naming node " + std::to_string(node));
  FrameHeader h;
  FUZZ_CHECK(size >= sizeof h, "accepted less than a frame header");
  std::memcpy(&h, data, sizeof h);
  std::string error;
  auto hello = decode_data_hello(data + sizeof h, h.bytes, error);
  FUZZ_CHECK(hello && hello->collective == t.collective && hello->token == t.token && hello->node == node &&
                 hello->protocol_version == protocol_version(),
             "accepted a hello that is not this collective's");
  return 0;
}
