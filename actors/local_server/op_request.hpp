// One peer's call of an op, or its request to create or destroy a group, as the local server sees
// it. Neither leaves the process: the peer thread hands it to the server's core directly, so each
// is a plain struct, not a message.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <chorus/tensor.hpp>
#include <chorus/types.hpp>
#include "core/op_desc.hpp"

namespace chorus {

struct TensorMeta {
  bool present = false;
  DType dtype = DType::f32;
  Shape shape;
  std::size_t numel() const;
  std::string describe() const;  // "f32[2, 3]" or "none"
  static TensorMeta of(const Tensor& t);
};

struct OpRequestData {
  uint32_t peer = 0;
  // What the call names: kind, group, sequence, reduce op and root. The root is the caller's
  // PeerId, not yet checked (static_cast<uint32_t>(op.root) is what it passed; check_request
  // names it so). dtype, count and on_device are left to the agreement (OpShape): what a peer
  // brings is its tensors, `input` and `output`.
  OpDesc op;
  TensorMeta input, output;
  uint32_t other = 0;
  uint64_t tag = 0;
  bool any_source = false;  // recv: from whichever peer sends first (Peer::recv_any); `other` unused
  bool root_from_data = false;
  uint64_t epoch = 0;
  uint32_t rank = 0;  // the caller's rank in the op's group, set by the server
};

// Create a group (every member sends the same member list) or release one (destroy).
struct GroupRequestData {
  uint32_t peer = 0;
  uint64_t epoch = 0;             // the registration generation (as in OpRequestData)
  std::vector<uint32_t> members;  // global peer ids; rank i in the group is members[i]
  bool destroy = false;
  uint32_t group = 0;             // destroy: the group to release
};

} // namespace chorus
