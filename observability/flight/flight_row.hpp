// One peer's part in one op as the flight recorder keeps it, and a recorder read back from its
// file (flight_file.hpp): what the recorder, its file format and the report share.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/tensor.hpp>
#include <chorus/types.hpp>
#include "core/op_desc.hpp"

namespace chorus {

inline constexpr uint64_t kNoSeq = UINT64_MAX;  // send/recv: no sequence number

// waiting: entered, this process's other peers of the op not all there yet; running: matched,
// moving data (across nodes this includes waiting for the other nodes' data); then done or failed.
enum class FlightState : uint8_t { waiting, running, done, failed };
std::string_view to_string(FlightState s);
bool parse_flight_state(std::string_view text, FlightState& s);

struct FlightRow {
  uint64_t ticket = 0;  // 0: an empty slot
  uint32_t peer = 0;    // global peer id (the rank in the world)
  uint32_t rank = 0;    // in the op's group
  // The op: its kind, group, sequence (kNoSeq: send/recv), reduce op and root (the caller's PeerId
  // as given, recorded before the checks: static_cast<uint32_t>(op.root) is what it passed); where
  // has_data, its dtype, count (the shape's elements) and on_device too (a file read back does not
  // keep on_device).
  OpDesc op{.seq = kNoSeq};
  bool has_data = false;  // dtype and shape are known (barrier: none)
  Shape shape;
  uint32_t other = 0;  // send/recv: the other side's rank in the group
  uint64_t tag = 0;
  uint64_t bytes = 0;
  std::string strategy;  // what ran it, once matched ("" before)
  FlightState state = FlightState::waiting;
  int64_t enter_ns = 0, matched_ns = 0, exit_ns = 0;  // UNIX time in ns (flight_clock readings in a recorder slot); 0: not yet
  std::string error;  // failed: the op's error

  bool collective() const { return op.seq != kNoSeq; }
  // "all_reduce f32[1024] sum", "broadcast f32[4] root 2", "send f32[8] to 3 tag 5".
  std::string describe() const;
  // What every peer of one collective must agree on (kind, dtype, shape, root, reduce op).
  bool same_call(const FlightRow& o) const;
};

// A recorder's file, read back.
struct FlightDump {
  int64_t pid = 0;
  int64_t node = -1;
  std::string host;
  std::string reason;
  int64_t written_ns = 0;
  int64_t world = -1;  // the job's peers, the ranks of group 0 (-1: not known when written)
  std::vector<FlightRow> rows;
};

} // namespace chorus
