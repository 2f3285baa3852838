#include "cuda/task_queue.hpp"

#include <exception>

namespace chorus::gpu {

namespace {
// A caller usually hears back within microseconds (bookkeeping, small ops), and an actor between
// tasks of a busy op stream gets its next one as soon: both spin that long before sleeping.
constexpr std::chrono::microseconds kCallerSpin{100};
constexpr std::chrono::microseconds kServerSpin{50};
} // namespace

struct TaskQueue::Job {
  Task task;
  // queued -> running (the serving thread took it) or queued -> abandoned (its caller gave up
  // first: it is skipped); one compare-and-swap decides which.
  enum State : int { queued, running, abandoned };
  std::atomic<int> state{queued};
  Status result;  // written before `done` rises, read only after
  WaitWord done;  // 1 once the task ran (or was skipped)
};

TaskQueue::TaskQueue(std::string name, uint32_t rewind_at) : name_(std::move(name)), rewind_at_(rewind_at) {}

TaskQueue::Ticket TaskQueue::submit(Task task) {
  auto job = std::make_shared<Job>();
  job->task = std::move(task);
  {
    std::lock_guard<std::mutex> lk(mu_);
    jobs_.push_back(job);
  }
  // Read after the push, so at least what the server read before it found the queue empty (it
  // rewinds only when it found a task): the server wakes.
  posted_.set(posted_.value.load(std::memory_order_seq_cst) + 1);
  return job;
}

Status TaskQueue::wait(const Ticket& job, Clock::time_point deadline, const std::string& what, bool abandon) {
  if (job->done.wait_at_least(1, deadline, kCallerSpin)) return job->result;
  int q = Job::queued;
  const bool skipped = abandon && job->state.compare_exchange_strong(q, Job::abandoned);
  if (!skipped && job->done.value.load(std::memory_order_acquire) >= 1) return job->result;  // just in
  return {Errc::timeout, what + " on " + name_ + (skipped ? " did not start in time (skipped)" : " did not finish in time")};
}

bool TaskQueue::empty() {
  std::lock_guard<std::mutex> lk(mu_);
  return jobs_.empty();
}

bool TaskQueue::serve_one(Clock::time_point until, const std::function<Status(const Task&)>& run) {
  Ticket job;
  for (;;) {
    const uint32_t seen = posted_.value.load(std::memory_order_seq_cst);
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!jobs_.empty()) {
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
    }
    if (job) {
      // Rewound only here, so this call does not wait again with `seen`, and the next one reads
      // the word afresh.
      if (seen >= rewind_at_) posted_.value.store(0, std::memory_order_seq_cst);
      break;
    }
    if (!posted_.wait_at_least(seen + 1, until, kServerSpin)) return false;
  }
  Status result;
  if (int q = Job::queued; job->state.compare_exchange_strong(q, Job::running)) {
    try {
      result = run(job->task);
    } catch (const std::exception& e) {
      result = {Errc::device_error, name_ + ": device task failed: " + e.what()};
    } catch (...) {
      result = {Errc::device_error, name_ + ": device task failed with an unknown exception"};
    }
  }
  job->task = nullptr;  // what it holds goes now, not with the caller's last ticket
  job->result = std::move(result);
  job->done.set(1);
  return true;
}

} // namespace chorus::gpu
