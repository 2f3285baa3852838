// The control messages between peers and their local server (register, finish, reset) as C++
// types, and their Cap'n Proto codecs (messages/chorus.capnp). Op and group requests never leave
// the process and are plain structs (actors/local_server/op_request.hpp). Decoding validates enum
// ranges and returns an error string for garbled input.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <chorus/config.hpp>
#include <chorus/status.hpp>
#include "messages/envelope.hpp"

namespace chorus {

struct RegisterData {
  uint32_t protocol_version = 0;
  uint32_t peer = 0;
  Config config;
};

struct FinishData {
  uint32_t peer = 0;
  uint64_t epoch = 0;
};

uint32_t protocol_version();

Envelope encode_register(const RegisterData& r);
Envelope encode_peer_only(uint32_t peer, bool reset, uint64_t epoch = 0);  // Finish or Reset

std::optional<RegisterData> decode_register(const Envelope& e, std::string& error);
std::optional<uint32_t> decode_peer_only(const Envelope& e, bool reset, std::string& error);
std::optional<FinishData> decode_finish(const Envelope& e, std::string& error);

} // namespace chorus
