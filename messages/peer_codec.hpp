// Conversions between chorus's C++ types and the Cap'n Proto messages of messages/chorus.capnp.
// Decoding validates enum ranges and returns an error string for garbled input.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <chorus/config.hpp>
#include <chorus/status.hpp>
#include <chorus/tensor.hpp>
#include "messages/envelope.hpp"

namespace chorus {

struct TensorMeta {
  bool present = false;
  DType dtype = DType::f32;
  Shape shape;
  std::size_t numel() const;
  std::string describe() const;  // "f32[2, 3]" or "none"
  static TensorMeta of(const Tensor& t);
};

struct RegisterData {
  uint32_t protocol_version = 0;
  uint32_t peer = 0;
  Config config;
};

struct OpRequestData {
  uint32_t peer = 0;
  uint64_t seq = 0;
  uint32_t group = 0;
  OpKind kind = OpKind::barrier;
  ReduceOp redop = ReduceOp::sum;
  uint32_t root = 0;
  TensorMeta input, output;
  uint32_t other = 0;
  uint64_t tag = 0;
  bool root_from_data = false;
  uint64_t epoch = 0;
  uint32_t rank = 0;  // not on the wire: the caller's rank in the op's group, set by the server
};

// Create a group (every member sends the same member list) or release one (destroy).
struct GroupRequestData {
  uint32_t peer = 0;
  uint64_t epoch = 0;
  std::vector<uint32_t> members;  // global peer ids; rank i in the group is members[i]
  bool destroy = false;
  uint32_t group = 0;             // destroy: the group to release
};

struct FinishData {
  uint32_t peer = 0;
  uint64_t epoch = 0;
};

uint32_t protocol_version();

Envelope encode_register(const RegisterData& r);
Envelope encode_peer_only(uint32_t peer, bool reset, uint64_t epoch = 0);  // Finish or Reset
Envelope encode_op(const OpRequestData& r);
Envelope encode_reply(uint64_t seq, const Status& s);
Envelope encode_group(const GroupRequestData& r);

std::optional<RegisterData> decode_register(const Envelope& e, std::string& error);
std::optional<uint32_t> decode_peer_only(const Envelope& e, bool reset, std::string& error);
std::optional<FinishData> decode_finish(const Envelope& e, std::string& error);
std::optional<OpRequestData> decode_op(const Envelope& e, std::string& error);
std::optional<GroupRequestData> decode_group(const Envelope& e, std::string& error);
std::optional<Status> decode_reply(const Envelope& e, std::string& error);

} // namespace chorus
