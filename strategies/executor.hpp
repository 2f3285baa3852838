// Runs a schedule between the peer threads of one process. Each peer thread executes its own
// program; a send publishes a pointer into the sender's memory and a receive reads it in place
// (zero copies between threads), then marks it consumed so the sender may go on (the rendezvous of
// schedule.hpp). Every wait has the op's deadline; a failing peer aborts the op for all.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include <chorus/status.hpp>
#include "core/op_desc.hpp"
#include "core/wait.hpp"
#include "strategies/early_receives.hpp"
#include "strategies/schedule.hpp"
#include "strategies/step_trace.hpp"
#include "strategies/work_buffer.hpp"

namespace chorus {

// A schedule with every send paired to its receive: slot ids per step, checked once, cached.
struct CompiledSchedule {
  std::vector<Program> programs;
  std::vector<std::vector<uint32_t>> slot_of_step;  // [peer][flat step index]
  std::size_t num_slots = 0;
  // reach[p][q]: a chain of the schedule's messages leads from peer q to peer p (what an op's
  // announcements can ride along, actors/global_client/net_op.hpp). Only for up to kReachPeers peers; empty
  // beyond (then nothing is assumed to reach anyone).
  std::vector<std::vector<bool>> reach;
  static constexpr std::size_t kReachPeers = 64;
  // [peer]: the receives whose bytes may land in the work buffer before the peer reaches them
  // (strategies/early_receives.hpp); used across nodes.
  std::vector<std::vector<EarlyReceive>> early_receives;
  // Throws std::logic_error when sends and receives do not pair up.
  static std::shared_ptr<const CompiledSchedule> compile(std::vector<Program> programs);
};

// The steps of an op whose other side lives in another process; the global client implements
// them over its data connections (actors/global_client/global_client.hpp). Slot ids are those of the compiled
// schedule, which every node derives identically, so they name a transfer on the wire too.
class RemoteSteps {
 public:
  virtual ~RemoteSteps() = default;
  virtual bool is_remote(int peer) const = 0;
  // Hands [data, +bytes) to the connection towards `peer`; the memory stays untouched until
  // wait_sent(slot) returns.
  virtual void post_send(uint32_t slot, int peer, const std::byte* data, std::size_t bytes) = 0;
  virtual Status wait_sent(uint32_t slot) = 0;
  // Waits until the first `upto` of `bytes` bytes of slot `slot` (from `peer`) are here and returns
  // the payload's address, or nullptr with `error` set.
  virtual const std::byte* wait_received(uint32_t slot, int peer, std::size_t bytes, std::size_t upto,
                                         Status& error) = 0;
  virtual void done_with(uint32_t slot) = 0;
  // Local rank p offers `dst` as the place where slot `slot` lands: true when the bytes will be
  // read straight into it (wait_received then returns dst), false when they already started
  // elsewhere. conclude(p) withdraws p's offers that no transfer has used.
  virtual bool offer_destination(uint32_t slot, int p, std::byte* dst, std::size_t bytes) = 0;
  // Wakes every wait of this op with `why`.
  virtual void abort(const Status& why) = 0;
  // The op's outcome for local rank p once its program ended with `local`: the same error on every
  // peer of every node when the nodes disagree (waits for every node's announcement).
  virtual Status conclude(int p, Status local) = 0;
};

// The shared state of one op in flight. Created by the local server, handed to every peer.
class OpPlan {
 public:
  // `op`: what the schedule runs, over `n` peers.
  OpPlan(const OpDesc& op, int n, std::shared_ptr<const CompiledSchedule> schedule, Clock::time_point deadline,
         std::string label, std::shared_ptr<RemoteSteps> remote = nullptr, unsigned local_threads = 0);

  // Executes rank p's program over its work buffer. Returns the op's status for this peer.
  // `trace` (null: none) hears of every step run and, across nodes, of the wait for the outcome.
  Status run(int p, WorkBuffer& work, StepTrace* trace = nullptr);

  OpKind kind() const { return op_.kind; }
  DType dtype() const { return op_.dtype; }
  ReduceOp redop() const { return op_.redop; }
  int size() const { return n_; }
  int root() const { return op_.root; }
  std::size_t count() const { return op_.count; }
  const std::string& label() const { return label_; }

 private:
  struct alignas(64) Slot {
    WaitWord word;  // 0 empty, 1 posted, 2 consumed, 3 aborted
    const std::byte* data = nullptr;
  };
  void abort(Status why);
  Status aborted_status();
  template <bool kTraced>
  Status run_program(int p, WorkBuffer& work, StepTrace* trace);
  // A receive from another node, reduced or copied piece by piece as the bytes arrive; `landing`:
  // where an early offer (offer_early) lets them arrive, else null.
  Status receive_remote(int p, const Step& s, uint32_t slot, WorkBuffer& work, std::byte* landing);
  // A run's receives from other nodes offered early.
  struct Landing {
    std::size_t next = 0;             // into the schedule's early receives of the peer
    std::vector<EarlyReceive> later;  // copies put off to a later round (its `round`)
    std::vector<std::byte*> at;       // by flat step index: where the bytes land (empty: none)
  };
  // Once round r (its first step at flat index `first`) has posted its sends: offers the work
  // buffer's own memory to the receives from other nodes that may land early from round r on,
  // where safe (see EarlyReceive).
  void offer_early(int p, std::size_t r, std::size_t first, WorkBuffer& work, Landing& land);

  OpDesc op_;
  int n_;
  std::shared_ptr<const CompiledSchedule> schedule_;
  std::unique_ptr<Slot[]> slots_;
  Clock::time_point deadline_;
  Patience spin_;
  std::string label_;
  std::shared_ptr<RemoteSteps> remote_;
  std::atomic<bool> aborted_{false};
  std::mutex abort_mu_;
  Status abort_status_;
};

} // namespace chorus
