// What a node tells every other node when all of its peers have called one collective op
// (messages/chorus.capnp, OpAnnounce), and the one rule every node applies to the announcements of
// an op, so that a disagreement gives every peer of every node the same error.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <chorus/status.hpp>
#include <chorus/tensor.hpp>
#include <chorus/types.hpp>

namespace chorus {

struct OpAnnouncement {
  uint32_t node = 0;
  OpKind kind = OpKind::barrier;
  DType dtype = DType::f32;
  ReduceOp redop = ReduceOp::sum;
  uint32_t root = 0;       // global rank
  uint64_t count = 0;      // per-peer elements (strategies/schedule.hpp)
  Shape shape;             // the agreed tensor shape
  Status status;           // not ok: this node's own peers disagree
  std::string describe() const;  // "all_reduce sum of f32[4, 4]"
};

std::string encode_announcement(const OpAnnouncement& a);
std::optional<OpAnnouncement> decode_announcement(const void* data, std::size_t bytes, std::string& error);

// The error of op `seq` given every node's announcement (indexed by node; all present), or ok:
// the lowest node whose peers disagree among themselves, else the first node that differs from
// node 0, with the code of the first field that differs.
Status judge_announcements(const std::vector<OpAnnouncement>& all, uint64_t seq);
// The error a node reports for its own peers' disagreement, worded as every other node words it.
Status node_failure(const OpAnnouncement& a, uint64_t seq);
// The first difference between two announcements (ok when they agree).
Status compare_announcements(const OpAnnouncement& first, const OpAnnouncement& other, uint64_t seq);

// Envelope <-> bytes for frame payloads.
std::string envelope_bytes(const struct Envelope& e);
bool bytes_envelope(const void* data, std::size_t bytes, struct Envelope& e);

} // namespace chorus
