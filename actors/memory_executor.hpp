// Runs a schedule between the peer threads of one process. Each peer thread executes its own
// program; a send publishes a pointer into the sender's memory and a receive reads it in place
// (zero copies between threads), then marks it consumed so the sender may go on (the rendezvous of
// schedule.hpp). Every wait has the op's deadline; a failing peer aborts the op for all.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "actors/status.hpp"
#include "actors/wait.hpp"
#include "actors/work_buffer.hpp"
#include "strategies/schedule.hpp"

namespace chorus {

// A schedule with every send paired to its receive: slot ids per step, checked once, cached.
struct CompiledSchedule {
  std::vector<Program> programs;
  std::vector<std::vector<uint32_t>> slot_of_step;  // [peer][flat step index]
  std::size_t num_slots = 0;
  // Throws std::logic_error when sends and receives do not pair up.
  static std::shared_ptr<const CompiledSchedule> compile(std::vector<Program> programs);
};

// The shared state of one op in flight. Created by the local server, handed to every peer.
class OpPlan {
 public:
  OpPlan(OpKind kind, DType dtype, ReduceOp redop, int n, int root, std::size_t count,
         std::shared_ptr<const CompiledSchedule> schedule, Clock::time_point deadline,
         std::string label);

  // Executes rank p's program over its work buffer. Returns the op's status for this peer.
  Status run(int p, WorkBuffer& work);

  OpKind kind() const { return kind_; }
  DType dtype() const { return dtype_; }
  ReduceOp redop() const { return redop_; }
  int size() const { return n_; }
  int root() const { return root_; }
  std::size_t count() const { return count_; }
  const std::string& label() const { return label_; }

 private:
  struct alignas(64) Slot {
    WaitWord word;  // 0 empty, 1 posted, 2 consumed, 3 aborted
    const std::byte* data = nullptr;
  };
  void abort(Status why);
  Status aborted_status();

  OpKind kind_;
  DType dtype_;
  ReduceOp redop_;
  int n_, root_;
  std::size_t count_;
  std::shared_ptr<const CompiledSchedule> schedule_;
  std::unique_ptr<Slot[]> slots_;
  Clock::time_point deadline_;
  std::chrono::nanoseconds spin_;
  std::string label_;
  std::atomic<bool> aborted_{false};
  std::mutex abort_mu_;
  Status abort_status_;
};

} // namespace chorus
