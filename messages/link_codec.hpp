// A broken data connection between two nodes (messages/chorus.capnp: LinkLost) as a C++ type, its
// codec, and how every node words it. A node whose connection to another breaks (reset, aborted,
// garbled, cut off after a stall) reports it to the orchestrator, which tells every other member
// node (actors/orchestrator/, actors/global_client/).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "messages/envelope.hpp"

namespace chorus {

struct LinkLostData {
  uint64_t collective = 0;
  uint32_t reporter = 0;  // the node that saw it
  uint32_t other = 0;     // the node at the other end
  std::string reason;     // what the reporter saw
  bool operator==(const LinkLostData&) const = default;
};

// A reason is at most this long: encoding cuts a longer one, decoding refuses it.
inline constexpr std::size_t kMaxLinkReason = 512;

Envelope encode_link_lost(const LinkLostData& l);
// Garbled input, a node at both ends, or an overlong reason: nullopt with `error` set. Whether the
// nodes are members is the receiver's to check.
std::optional<LinkLostData> decode_link_lost(const Envelope& e, std::string& error);

// "the data connection between node 0 and node 2 broke (node 2 saw: <reason>)": the lower node
// first, so both ends and everyone they tell name a link alike.
std::string link_lost_message(const LinkLostData& l);

} // namespace chorus
