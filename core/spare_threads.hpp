// Threads kept for reuse. A node's setup runs work on threads of its own for a while (each data
// connection's hello check, the connecting to lower nodes, the poller's background reader): a
// shrink of 8 processes on 2 cores started and ended about 35 of them, a tenth of its CPU (clone,
// the stack's mapping and guard page, exit). So do the engine's lanes while they have work (a
// send/recv lane per message, where each message has a tag of its own). Such work takes a thread
// that finished earlier work instead; a thread idle for kSpareIdle ends.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <thread>

namespace chorus {

inline constexpr std::chrono::seconds kSpareIdle{30};

// A job's end, to wait for as std::thread::join waits for a thread's. As std::jthread, a job
// still joinable is joined when its handle goes or is assigned another, so a job that reads the
// caller's frame never outlives it.
class SpareJob {
 public:
  SpareJob() = default;
  SpareJob(SpareJob&&) noexcept = default;
  SpareJob& operator=(SpareJob&& o) noexcept;
  ~SpareJob();
  bool joinable() const { return static_cast<bool>(done_); }
  // Until the job has returned; then no longer joinable. From the job's own thread it throws
  // std::system_error (resource_deadlock_would_occur), as std::thread::join does.
  void join();
  void detach() { done_.reset(); }  // the job goes on unwatched
  struct Done;

 private:
  friend SpareJob run_on_spare_thread(std::function<void()> job);
  explicit SpareJob(std::shared_ptr<Done> done) : done_(std::move(done)) {}
  std::shared_ptr<Done> done_;
};

// Runs `job` on an idle kept thread, or on a new one (std::system_error, as std::thread, when
// none can be had). The thread is named "chorus-spare" between jobs; a job may name it.
[[nodiscard]] SpareJob run_on_spare_thread(std::function<void()> job);

// Until the kept thread `id` waits for a job, or `limit` has passed; whether it does (a hook for
// tests: a thread whose job ended takes the next job only once it is back on the list, and the
// last one back takes it).
bool spare_thread_idle(std::thread::id id, std::chrono::milliseconds limit);

} // namespace chorus
