// The mailbox of a device actor (cuda/device_worker.hpp), without CUDA: tasks run one at a time, in
// order, on the one thread that serves the queue, and their callers wait for each task's Status
// until a deadline. Both sides wait on WaitWords (core/wait.hpp): a short spin, since an answer or
// new work usually comes within microseconds, then a futex sleep; no lock is held while waiting.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include <chorus/status.hpp>

#include "core/wait.hpp"

namespace chorus::gpu {

class TaskQueue {
 public:
  using Task = std::function<Status()>;  // runs on the serving thread
  struct Job;
  using Ticket = std::shared_ptr<Job>;

  // `name` ("cuda:0") goes into the messages. `rewind_at`: see posted_ (tests make it small).
  explicit TaskQueue(std::string name, uint32_t rewind_at = uint32_t{1} << 31);

  // Queues `task`; wait() collects its Status.
  Ticket submit(Task task);
  // The task's Status, or a timeout naming `what` once `deadline` passes. A task that has not
  // started by then is skipped when `abandon` (one that has finishes on its own and must own what
  // it touches); with abandon = false it stays queued and runs later.
  Status wait(const Ticket& t, Clock::time_point deadline, const std::string& what, bool abandon = true);

  // Only on the serving thread: takes the next task, waiting for one until `until`, runs it
  // through `run` (which calls it, or answers for it) and hands the Status to its caller; an
  // exception out of `run` becomes a device_error. A task its caller abandoned is skipped. False
  // when no task came in time.
  bool serve_one(Clock::time_point until, const std::function<Status(const Task&)>& run);
  // Whether no task waits to be served.
  bool empty();

 private:
  const std::string name_;
  const uint32_t rewind_at_;
  std::mutex mu_;  // guards jobs_ for one push or one pop, never across a wait or a task
  std::deque<Ticket> jobs_;
  // Raised after every push; the serving thread sleeps on it when jobs_ is empty. The serving
  // thread, its only waiter, sets it back to 0 when it takes a task once the word has reached
  // rewind_at_ (WaitWord only rises: it would wrap after 2^32 tasks and the server would sleep
  // through new work).
  WaitWord posted_;
};

} // namespace chorus::gpu
