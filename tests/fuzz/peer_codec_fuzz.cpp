// The peers' control messages (messages/peer_codec.hpp: register, finish, reset) from any envelope:
// every decoder runs on the input, and what one accepts must encode and decode again to the same
// value (a register's config included, field by field: Config::first_difference).
#include "fuzz_kit.hpp"
#include "messages/peer_codec.hpp"

using namespace chorus;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const Envelope e = fuzz::as_envelope(data, size);
  std::string error, again_error;
  if (auto r = decode_register(e, error)) {
    FUZZ_CHECK(error.empty(), error);
    (void)r->config.validate();  // whatever the fields, validate() names a problem or passes
    auto again = decode_register(encode_register(*r), again_error);
    FUZZ_CHECK(again && again->protocol_version == r->protocol_version && again->peer == r->peer,
               "register does not round-trip: " + again_error);
    FUZZ_CHECK(again->config.first_difference(r->config).empty(), again->config.first_difference(r->config));
  } else {
    FUZZ_CHECK(!error.empty(), "a failed decode says why");
  }
  for (bool reset : {false, true}) {
    error.clear();
    if (auto peer = decode_peer_only(e, reset, error)) {
      auto again = decode_peer_only(encode_peer_only(*peer, reset), reset, again_error);
      FUZZ_CHECK(again && *again == *peer, "finish/reset does not round-trip: " + again_error);
    } else {
      FUZZ_CHECK(!error.empty(), "a failed decode says why");
    }
  }
  error.clear();
  if (auto f = decode_finish(e, error)) {
    auto again = decode_finish(encode_peer_only(f->peer, false, f->epoch), again_error);
    FUZZ_CHECK(again && again->peer == f->peer && again->epoch == f->epoch, "finish does not round-trip");
  } else {
    FUZZ_CHECK(!error.empty(), "a failed decode says why");
  }
  return 0;
}
