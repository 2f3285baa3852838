// What travels on a data connection between two nodes, whatever carries it: frames, each a fixed
// 32-byte header and a payload, and the FrameSink that a connection hands arriving frames to.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace chorus {

// p2p_data: payload = a P2PHeader message (`slot` == `bytes`). Its data follows at once as a
// p2p_body frame (payload = the data; `seq` = the message's id; P2PHeaderData::data_follows:
// not where the send failed or the tensor has no elements), unless the header says `pulled`:
// then the data waits for the receive's p2p_pull (a P2PAck naming the message) and goes as a
// p2p_body then, or the sender answers the pull with p2p_pulled (a P2PAck with why it cannot).
// stragglers: payload = a Stragglers message (the ranks an op of the header's group and seq still
// waits for at the sender's node, half its timeout gone).
// leaving: payload = a Leaving message (why the header's op failed at the sender, which leaves).
// gave_up: payload = a Leaving message (the header's op timed out at the sender: its error, which
// every node then reports for that op, unless it already ended there); slot kNeverLaunched: it
// timed out among the sender's own peers, which will never take part (other nodes stop waiting).
// arena_offer: payload = a SharedSegment::Offer (node 0's arena for a job on one host);
// arena_answer: payload = one byte, 1 when the sender mapped it (mesh/host_arena.hpp).
enum class FrameType : uint32_t {
  hello = 1, announce = 2, data = 3, p2p_data = 5, p2p_ack = 6, bye = 7, stragglers = 8, leaving = 9,
  arena_offer = 10, arena_answer = 11, p2p_cancel = 12, p2p_pull = 13, p2p_pulled = 14,
  gave_up = 15, p2p_body = 16
};

// A gave_up frame's slot: the sender's peers timed out before its part of the op began.
inline constexpr uint32_t kNeverLaunched = 1;

struct FrameHeader {
  uint32_t magic = kMagic;
  FrameType type = FrameType::data;
  uint32_t group = 0;
  uint32_t slot = 0;   // data: the schedule's slot id; p2p: the pair's sequence number
  uint64_t seq = 0;    // the op's sequence number (p2p: source << 32 | destination)
  uint64_t bytes = 0;  // payload length
  static constexpr uint32_t kMagic = 0x43484f52;  // "CHOR": a collective's first membership epoch
  // Each membership epoch stamps its frames apart (the low half counts epochs): a connection kept
  // across a shrink or grow hands on only its current epoch's frames, and drops what an earlier
  // epoch still had on the way (transport/connection.hpp: rehome).
  static constexpr uint32_t magic_of(uint32_t epoch) { return (kMagic & 0xffff0000u) | ((kMagic + epoch) & 0xffffu); }
  static constexpr bool ours(uint32_t magic) { return (magic & 0xffff0000u) == (kMagic & 0xffff0000u); }
  // Whether `magic` (ours) is of an epoch after `current`'s (the counts wrap: within half of them).
  static constexpr bool later(uint32_t magic, uint32_t current) {
    const uint32_t ahead = (magic - current) & 0xffffu;
    return ahead != 0 && ahead < 0x8000u;
  }
};
static_assert(sizeof(FrameHeader) == 32);

// A whole frame (header and payload) as bytes, e.g. to queue behind or ahead of others.
inline std::string whole_frame(FrameHeader h, const std::string& payload) {
  h.bytes = payload.size();
  return std::string(reinterpret_cast<const char*>(&h), sizeof h) + payload;
}

// Receives the frames of one connection (called by the thread that pumps it, one at a time).
class FrameSink {
 public:
  virtual ~FrameSink() = default;
  // Where the payload goes (at least h.bytes), or nullptr to read and drop it.
  virtual std::byte* begin_frame(uint32_t node, const FrameHeader& h) = 0;
  // `got` bytes of the payload have arrived so far (called after every read, and once at the end).
  virtual void progress(uint32_t node, const FrameHeader& h, std::size_t got) = 0;
  // The connection died in the middle of this frame's payload: nothing more is written to it.
  virtual void frame_failed(uint32_t node, const FrameHeader& h) = 0;
  // The connection ended: `orderly` after a bye frame; otherwise the other side's end of the
  // stream came without one (its process exited or died; the reason says how).
  virtual void closed(uint32_t node, bool orderly, const std::string& why) = 0;
  // The connection broke rather than ended: a reset or an abort, a read error, garbled bytes; the
  // other process may well be alive. Unless overridden, a non-orderly end like any other.
  virtual void broken(uint32_t node, const std::string& why) { closed(node, false, why); }
};

} // namespace chorus
