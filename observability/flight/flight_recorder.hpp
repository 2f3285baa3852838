// The flight recorder: every process keeps its peers' last ops (kind, dtype, shape, root, reduce
// op, group, sequence number, strategy, bytes, when each peer entered, was matched and left, and
// how it ended), so that after a timeout, a node loss or any op error (or on SIGUSR1) there is a
// record of what every rank was doing, in the manner of torch's NCCL flight recorder.
// `chorus-ctl flight FILE...` prints one or several recorders side by side (flight_report.hpp).
// Each local peer has a ring of its own with its own lock, taken only by that peer's thread and by
// a dump, so recording costs a few uncontended lock/unlock pairs per op and no allocation once the
// ring has filled (slots are reused with their buffers).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/result.hpp>
#include <chorus/status.hpp>
#include <chorus/tensor.hpp>
#include <chorus/types.hpp>
#include "observability/flight/flight_row.hpp"
#include "strategies/tuning.hpp"

namespace chorus {

struct Config;
class FlightSpare;

// What a peer knows of its op when it enters it.
struct FlightOp {
  uint32_t peer = 0;   // global peer id
  uint32_t rank = 0;   // in the group
  // Its kind, group, sequence (collectives; send/recv have none: kNoSeq), reduce op and root (as
  // FlightRow's: as given); begin() takes dtype, count and on_device from `data`.
  OpDesc op{.seq = kNoSeq};
  uint32_t other = 0;  // send/recv: the other side's rank in the group
  uint64_t tag = 0;
  const Tensor* data = nullptr;  // the tensor that names dtype and shape (input, else output)

  // `op` with the dtype, count and device of `data` where it is defined (the recorder's row and
  // the trace's span keep this).
  OpDesc described() const;
};

class FlightRecorder {
 public:
  // `peers`: the local peers (ids 0 .. peers-1); `entries`: ops kept per peer (> 0); `dir`: where
  // dumps go.
  FlightRecorder(uint32_t peers, uint32_t entries, std::string dir);
  ~FlightRecorder();

  // A peer enters an op: returns the ticket its later calls name (0: `local_peer` out of range).
  uint64_t begin(uint32_t local_peer, const FlightOp& op);
  // Its op was matched (every peer of this process came; the data phase begins).
  void matched(uint32_t local_peer, uint64_t ticket, const RunStrategy& strategy);
  // Its op ended. A failure writes a dump (the first failure of an op, at most one a second, so a
  // loop of failing calls does not write a file each time) before it returns, outside every lock,
  // and logs where, at warn (op).
  void end(uint32_t local_peer, uint64_t ticket, const Status& status);

  // Every recorded op of every local peer, oldest first (by entry time).
  std::vector<FlightRow> rows() const;
  // Each local peer's newest op (by local peer id; none before its first).
  std::vector<std::optional<FlightRow>> newest() const;
  // Writes the recorder to its file (overwritten by the next dump), now, and returns the path.
  Result<std::string> dump(std::string_view reason) const;
  // What a dump holds: the process, the job's size, `reason` and every row, as they are now.
  FlightDump snapshot(std::string_view reason) const;
  // The file dumps go to: DIR/chorus-flight-PID-K.txt (K: this recorder's number in the process).
  const std::string& path() const { return path_; }
  // Multi-node: the node's id, written in the dump's header (-1 until known).
  void set_node(int64_t node) { node_.store(node, std::memory_order_relaxed); }
  int64_t node() const { return node_.load(std::memory_order_relaxed); }
  // The job's peers, written in the dump's header, so that the report can name a rank that
  // recorded nothing (-1 until known: a node learns it when it joins).
  void set_world(uint32_t peers) { world_.store(peers, std::memory_order_relaxed); }

  // The recorder a registration asks for: Config::flight_recorder entries (CHORUS_FLIGHT_RECORDER
  // wins; 0: none, nullptr; one that is not a number within Config::kMaxFlightRecorder is an
  // invalid_config error) in Config::flight_dir (CHORUS_FLIGHT_DIR wins; default: TMPDIR or
  // /tmp). Registers it for SIGUSR1 dumps (flight_signal.cpp) unless Config::flight_signal is off
  // (CHORUS_FLIGHT_SIGNAL=0).
  static Result<std::shared_ptr<FlightRecorder>> for_config(const Config& config);

 private:
  struct Slot {
    FlightRow row;
    RunStrategy strategy;
  };
  struct Ring {
    mutable std::mutex mu;  // a leaf: nothing else is taken or done under it but copying a slot
    std::vector<Slot> slots;
    uint64_t next = 1;  // the next ticket
  };
  Slot* slot(Ring& r, uint64_t ticket);  // under r.mu: the ticket's slot, or null once overwritten
  void dump_on_failure(const FlightRow& row) const;

  std::vector<std::unique_ptr<Ring>> rings_;
  uint32_t entries_;
  std::string path_;
  std::unique_ptr<FlightSpare> spare_;  // the next failure's file, made ahead
  std::atomic<int64_t> node_{-1};
  std::atomic<int64_t> world_{-1};
  mutable std::mutex dump_mu_;  // guards the two below: whether a failure writes a dump
  mutable int64_t last_failure_dump_ns_ = 0;
  mutable std::pair<uint32_t, uint64_t> last_failure_op_{UINT32_MAX, kNoSeq};
};

// flight_signal.cpp: dumps every live recorder of the process when it receives SIGUSR1 (from a
// thread of its own: the handler only writes a byte to a pipe). Installed once, with the first
// recorder that asks; a SIGUSR1 handler the host app installed before is left alone (logged).
void watch_for_dump_signal(const std::shared_ptr<FlightRecorder>& recorder);
// Tests: called with each path the watcher has written, after writing it.
void set_dump_signal_hook(std::function<void(const std::string&)> hook);

} // namespace chorus
