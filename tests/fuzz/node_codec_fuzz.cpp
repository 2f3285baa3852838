// The orchestrator's messages (messages/node_codec.hpp) from any envelope, as the orchestrator and
// a node receive them over CAF: every decoder runs on the input, and what one accepts must encode
// and decode again to the same value.
#include "fuzz_kit.hpp"
#include "messages/node_codec.hpp"

namespace {

using namespace chorus;

bool same(const NodeRegisterData& a, const NodeRegisterData& b) {
  return a.protocol_version == b.protocol_version && a.secret == b.secret && a.config == b.config &&
         a.num_peers == b.num_peers && a.data_address == b.data_address && a.hardware_threads == b.hardware_threads &&
         a.host_key == b.host_key && a.gpus == b.gpus;
}

template <class T, class Encode, class Decode, class Same>
void round_trip(const std::optional<T>& v, const std::string& error, Encode encode, Decode decode, Same same,
                const char* what) {
  FUZZ_CHECK(v.has_value() == error.empty(), std::string(what) + ": an error exactly when decoding failed");
  if (!v) return;
  std::string again_error;
  auto again = decode(encode(*v), again_error);
  FUZZ_CHECK(again && same(*v, *again), std::string(what) + " does not round-trip: " + again_error);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const Envelope e = fuzz::as_envelope(data, size);
  std::string e1, e2, e3, e4;
  round_trip(decode_node_register(e, e1), e1, encode_node_register, decode_node_register, same, "register");
  round_trip(decode_node_register_reply(e, e2), e2,
             [](const NodeRegisterReplyData& r) { return encode_node_register_reply(r.status, r.topology); },
             decode_node_register_reply,
             [](const NodeRegisterReplyData& a, const NodeRegisterReplyData& b) {
               return a.status.code() == b.status.code() && a.topology == b.topology &&
                      (a.status.is_ok() || a.status.message() == b.status.message());
             },
             "register reply");
  round_trip(decode_node_leave(e, e3), e3, encode_node_leave, decode_node_leave,
             [](const NodeLeaveData& a, const NodeLeaveData& b) {
               return a.collective == b.collective && a.node_id == b.node_id;
             },
             "leave");
  round_trip(decode_node_lost(e, e4), e4, encode_node_lost, decode_node_lost,
             [](const NodeLostData& a, const NodeLostData& b) {
               return a.collective == b.collective && a.node_id == b.node_id && a.reason == b.reason;
             },
             "lost");
  return 0;
}
