// The data plane's messages (messages/data_codec.hpp) from any bytes, as frame_routing.cpp and
// data_hello.cpp receive them: every decoder runs on the input; what one accepts must encode and
// decode again to the same value (whatever it accepts, the other side could have sent).
#include "fuzz_kit.hpp"
#include "messages/data_codec.hpp"

namespace {

using namespace chorus;

bool same(const OpAnnouncement& a, const OpAnnouncement& b) {
  return a.node == b.node && a.kind == b.kind && a.dtype == b.dtype && a.redop == b.redop && a.root == b.root &&
         a.count == b.count && a.shape == b.shape && a.status == b.status && a.gpu == b.gpu && a.devices == b.devices &&
         a.nccl_live == b.nccl_live && a.nccl_last == b.nccl_last && a.nccl_id == b.nccl_id &&
         a.timeout_ms == b.timeout_ms;
}

template <class T, class Encode, class Decode, class Same>
void round_trip(const std::optional<T>& v, const std::string& error, Encode encode, Decode decode, Same same,
                const char* what) {
  FUZZ_CHECK(v.has_value() == error.empty(), std::string(what) + ": an error exactly when decoding failed");
  if (!v) return;
  const std::string bytes = encode(*v);
  std::string again_error;
  auto again = decode(bytes.data(), bytes.size(), again_error);
  FUZZ_CHECK(again && same(*v, *again), std::string(what) + " does not round-trip: " + again_error);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  std::string e1, e2, e3, e4, e5, e6;
  round_trip(decode_data_hello(data, size, e1), e1, encode_data_hello, decode_data_hello,
             [](const DataHello& a, const DataHello& b) {
               return a.protocol_version == b.protocol_version && a.collective == b.collective && a.node == b.node &&
                      a.token == b.token;
             },
             "hello");
  round_trip(decode_announcement(data, size, e2), e2, encode_announcement, decode_announcement, same, "announcement");
  round_trip(decode_p2p_header(data, size, e3), e3, encode_p2p_header, decode_p2p_header,
             [](const P2PHeaderData& a, const P2PHeaderData& b) {
               return a.source == b.source && a.destination == b.destination && a.tag == b.tag && a.dtype == b.dtype &&
                      a.numel == b.numel && a.failed == b.failed;
             },
             "send header");
  round_trip(decode_p2p_ack(data, size, e4), e4, encode_p2p_ack, decode_p2p_ack,
             [](const P2PAckData& a, const P2PAckData& b) {
               return a.source == b.source && a.destination == b.destination && a.tag == b.tag && a.status == b.status;
             },
             "send answer");
  round_trip(decode_stragglers(data, size, e5), e5, encode_stragglers, decode_stragglers,
             [](const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) { return a == b; }, "straggler note");
  round_trip(decode_leaving(data, size, e6), e6, encode_leaving, decode_leaving,
             [](const Status& a, const Status& b) { return a == b; }, "leaving note");
  return 0;
}
