// A node's registration as the orchestrator takes it (actors/orchestrator/orchestrator.cpp):
// decode_node_register on any envelope, then the admission rules (OrchestratorCore, free of CAF)
// on what decoded, as the second node of a 2-node collective whose first node registered
// properly. Every reply must be one the node's own decoder takes back (encoded and decoded), an
// accepted registration must meet every rule (version, a valid config equal to the first
// node's but for its per-node fields, a data address of its own; the secret is the front door's),
// and a complete collective's
// topology must add up.
#include "actors/orchestrator/orchestrator_core.hpp"
#include "fuzz_kit.hpp"
#include "messages/node_codec.hpp"
#include "messages/peer_codec.hpp"

using namespace chorus;

namespace {

void check_reply(const OrchestratorCore::Reply& r) {
  std::string error;
  auto back = decode_node_register_reply(encode_node_register_reply(r.status, r.topology), error);
  FUZZ_CHECK(back, "the orchestrator's reply does not decode: " + error);
  FUZZ_CHECK(back->status.code() == r.status.code(), "reply code");
  FUZZ_CHECK(r.status.is_ok() || !r.status.message().empty(), "a rejection says why");
  if (!r.status.is_ok()) return;
  FUZZ_CHECK(back->topology == r.topology, "topology round trip");
  const TopologyData& t = r.topology;
  uint64_t peers = 0;  // wide: a sum that wraps in 32 bits is a finding
  for (const NodeEntry& n : t.nodes) {
    FUZZ_CHECK(n.peer_offset == peers && n.num_peers > 0, "peer offsets add up");
    peers += n.num_peers;
  }
  FUZZ_CHECK(t.num_nodes == 2 && t.total_peers == peers, "the topology adds up: " + std::to_string(peers) + " peers");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const Envelope e = fuzz::as_envelope(data, size);
  std::string error;
  auto reg = decode_node_register(e, error);
  OrchestratorCore core({2, std::chrono::milliseconds(1000), [] { return uint64_t{0x5eed}; }});
  auto fx = core.on_register(1, fuzz::node_registration("127.0.0.1:7100"));
  FUZZ_CHECK(fx.replies.empty() && core.registered() == 1, "the first node waits");
  fx = reg ? core.on_register(2, *reg) : core.on_garbled(2);
  for (const auto& r : fx.replies) check_reply(r);
  if (!reg) {
    FUZZ_CHECK(fx.replies.size() == 1 && fx.replies[0].status.code() == Errc::invalid_argument &&
                   fx.replies[0].status.message() == "garbled registration",
               "a garbled registration is answered so, without the decoder's text");
    return 0;
  }
  const bool accepted = core.complete();
  FUZZ_CHECK(fx.replies.size() == (accepted ? 2u : 1u) || (!accepted && fx.replies.size() == 2u),
             "replies: both nodes once complete; else the sender's, and the waiting node's too when the refusal ends its admission");
  if (!accepted) {
    const Status& refused = fx.replies.back().status;
    FUZZ_CHECK(fx.replies.back().to == 2 && !refused.is_ok(), "the sender is refused, last");
    // A repeat leaves the first node waiting; any other refusal of a node of the job ends that
    // node's admission too, naming the sender's address and the reason.
    const bool ends = refused.code() != Errc::register_twice && refused.code() != Errc::busy;
    FUZZ_CHECK(fx.replies.size() == (ends ? 2u : 1u), "the waiting node is told exactly when the refusal ends its admission");
    FUZZ_CHECK(core.registered() == (ends ? 0u : 1u), "an ended admission holds nobody");
    if (ends)
      FUZZ_CHECK(fx.replies[0].to == 1 && fx.replies[0].status.code() == refused.code() &&
                     fx.replies[0].status.message().find("was refused: " + refused.message()) != std::string::npos,
                 "the waiting node hears who was refused and why");
    return 0;
  }
  const NodeRegisterData first = fuzz::node_registration("127.0.0.1:7100");
  FUZZ_CHECK(reg->protocol_version == protocol_version() && reg->secret.empty(), "version, and no secret decoded");
  FUZZ_CHECK(reg->config.validate().is_ok(), "a valid config");
  FUZZ_CHECK(node_independent(reg->config) == node_independent(first.config), "the first node's config");
  FUZZ_CHECK(reg->num_peers > 0 && !reg->data_address.empty() && reg->data_address != first.data_address,
             "peers and a data address of its own");
  // Both leave: the next collective starts empty.
  core.on_leave(1);
  core.on_leave(2);
  FUZZ_CHECK(core.registered() == 0 && core.collective() == 2, "both left: the next collective");
  return 0;
}
