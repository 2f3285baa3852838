#include "engine/lane.hpp"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "core/wait.hpp"  // chorus::Clock

namespace chorus {

// Waking the lane's thread for a task costs its submitter a system call and, on a busy host, a
// race with the caller who waits for the task at once and would run it itself (a blocking call from
// Python is a non-blocking op and its wait): about 3 us of a 1 KiB op's 8 from torch.distributed,
// measured. So a lane whose tasks are claimed by their waiters right after they were handed in
// turns lazy: it hands tasks that have a waiter's runner to no thread at once, and its thread
// looks every kLazyAge for one nobody came for, which it runs, turning eager again. A task
// claimed kQuick or later after it was handed in (its caller overlapped it with work of its own)
// turns the lane eager as well: such a caller wants the op running meanwhile.
constexpr auto kQuick = std::chrono::microseconds(50);
constexpr auto kLazyAge = std::chrono::milliseconds(1);
constexpr int kQuickClaimsToLazy = 4;

struct Lane::Core {
  std::mutex mu;
  std::condition_variable cv;  // work came, the lane was let go, or the Lane is gone
  struct Queued {
    const void* key;
    Task task;
    Clock::time_point at;  // handed in (tasks with a key only)
  };
  std::deque<Queued> queue;
  bool busy = false;            // a task runs (on the lane's thread or a caller's)
  bool thread_running = false;  // the lane's thread exists
  bool closed = false;          // the Lane is gone: the thread ends once the queue is empty
  bool lazy = false;            // see kLazyAge
  int quick_claims = 0;         // tasks claimed by their waiters within kQuick, in a row (capped)
  Clock::time_point last_used;  // a task last ran, on the lane's thread or a waiter's
  std::chrono::milliseconds idle{0};
};

namespace {
// The lanes this thread holds (a task of one may call an op of another handle), innermost last.
struct Held {
  static constexpr int kMax = 8;
  const Lane::Core* lanes[kMax] = {};
  int n = 0;
  bool has(const Lane::Core* c) const {
    for (int i = 0; i < n && i < kMax; ++i)  // past kMax, the deepest are not remembered
      if (lanes[i] == c) return true;
    return false;
  }
};
thread_local Held tl_held;

void push_held(const Lane::Core* c) {
  if (tl_held.n < Held::kMax) tl_held.lanes[tl_held.n] = c;
  ++tl_held.n;  // past kMax the deepest are not remembered (never so deep in practice)
}
void pop_held() { --tl_held.n; }

// Under c->mu: a thread to run what is queued, if none is there.
void ensure_thread(const std::shared_ptr<Lane::Core>& c);

// Under c->mu: whether the lane's thread takes the first queued task now. A lazy lane leaves a task
// with a waiter to it until the task is kLazyAge old; `until` is then when to look again.
bool thread_takes_front(Lane::Core& c, Clock::time_point& until) {
  if (c.busy || c.queue.empty()) return false;
  const auto& front = c.queue.front();
  if (!front.key) return true;
  if (!c.lazy) {
    c.quick_claims = 0;  // taken before its waiter came: the lane's ops run beside their callers
    return true;
  }
  until = front.at + kLazyAge;
  if (Clock::now() < until) return false;
  c.lazy = false;  // nobody came for it: wake the thread at once again
  c.quick_claims = 0;
  return true;
}

void run_lane(std::shared_ptr<Lane::Core> c) {
  std::unique_lock<std::mutex> lk(c->mu);
  c->last_used = Clock::now();
  for (;;) {
    Clock::time_point until{};
    if (!thread_takes_front(*c, until)) {
      if (c->closed && c->queue.empty()) break;
      // Unused that long with nothing queued: end (the next task starts a thread). Work queued
      // behind a caller that holds the lane keeps it: the caller's release wakes it.
      const auto now = Clock::now();
      if (c->queue.empty() && now - c->last_used >= c->idle) break;
      // Sleeps while a caller holds the lane or nothing is queued: until the idle time is up, a
      // lazy lane's task is due, or (lazy) kLazyAge, since a lazy lane's submit wakes no one.
      auto wake = c->queue.empty() ? c->last_used + c->idle : now + c->idle;
      if (until != Clock::time_point{}) wake = std::min(wake, until);
      if (c->lazy) wake = std::min(wake, now + kLazyAge);
      c->cv.wait_until(lk, wake);
      continue;
    }
    {
      Lane::Task t = std::move(c->queue.front().task);
      c->queue.pop_front();
      c->busy = true;
      lk.unlock();
      push_held(c.get());
      t();
      t = nullptr;  // what the task held goes now, not under the lock (it may own the Lane)
      pop_held();
      lk.lock();
      c->busy = false;
      c->last_used = Clock::now();
    }
  }
  c->thread_running = false;
}

void ensure_thread(const std::shared_ptr<Lane::Core>& c) {
  if (c->thread_running) {
    c->cv.notify_one();
    return;
  }
  c->thread_running = true;
  std::thread(run_lane, c).detach();  // holds the core; ends by itself (idle, or closed and empty)
}

// Under c->mu: someone waits for the task `key` without running it (the lane is busy, the task is
// not first in line, or the wait has a limit, polls or registered a callback): a lazy lane turns
// eager, so that its thread takes the task as soon as it can rather than a millisecond after it came.
void hurry(const std::shared_ptr<Lane::Core>& c, const void* key) {
  if (!c->lazy) return;
  for (const auto& q : c->queue) {
    if (q.key != key) continue;
    c->lazy = false;
    c->quick_claims = 0;
    ensure_thread(c);
    return;
  }
}
} // namespace

Lane::Lane(std::chrono::milliseconds idle) : core_(std::make_shared<Core>()) { core_->idle = idle; }

Lane::~Lane() {
  std::lock_guard<std::mutex> lk(core_->mu);
  core_->closed = true;
  core_->cv.notify_all();
}

void Lane::submit(Task t, const void* key) {
  std::lock_guard<std::mutex> lk(core_->mu);
  core_->queue.push_back({key, std::move(t), key ? Clock::now() : Clock::time_point{}});
  // A lazy lane's running thread looks by itself (kLazyAge); where a caller holds the lane, the
  // thread waits for its release.
  if (!(core_->lazy && key && core_->thread_running)) ensure_thread(core_);
}

std::function<bool()> Lane::runner(const void* key) const {
  return [weak = std::weak_ptr<Core>(core_), key] {
    auto c = weak.lock();  // the lane's core outlives the Lane while tasks are queued
    if (!c || tl_held.has(c.get())) return false;  // this thread runs one of the lane's tasks: not now
    Lane::Task t;
    {
      std::lock_guard<std::mutex> lk(c->mu);
      if (c->busy || c->queue.empty() || c->queue.front().key != key) {
        hurry(c, key);  // its waiter sleeps until the lane's thread has run it
        return false;
      }
      const auto now = Clock::now();
      const bool quick = now - c->queue.front().at < kQuick;
      c->quick_claims = quick ? std::min(c->quick_claims + 1, kQuickClaimsToLazy) : 0;
      c->last_used = now;
      c->lazy = quick && c->quick_claims >= kQuickClaimsToLazy;
      t = std::move(c->queue.front().task);
      c->queue.pop_front();
      c->busy = true;
    }
    push_held(c.get());
    t();
    t = nullptr;  // what the task held goes now, not under the lock
    pop_held();
    std::lock_guard<std::mutex> lk(c->mu);
    c->busy = false;
    if (!c->queue.empty()) ensure_thread(c);
    return true;
  };
}

std::function<void()> Lane::hurrier(const void* key) const {
  return [weak = std::weak_ptr<Core>(core_), key] {
    if (auto c = weak.lock()) {
      std::lock_guard<std::mutex> lk(c->mu);
      hurry(c, key);
    }
  };
}

Lane::Hold Lane::enter() {
  if (tl_held.has(core_.get())) return Hold(core_, false);
  std::lock_guard<std::mutex> lk(core_->mu);
  if (core_->busy || !core_->queue.empty()) return Hold();
  core_->busy = true;
  push_held(core_.get());
  return Hold(core_, true);
}

Lane::Hold::~Hold() {
  if (!core_ || !acquired_) return;
  pop_held();
  std::lock_guard<std::mutex> lk(core_->mu);
  core_->busy = false;
  if (!core_->queue.empty()) ensure_thread(core_);
}

bool Lane::wakes_at_once() const {
  std::lock_guard<std::mutex> lk(core_->mu);
  return !core_->lazy;
}

bool Lane::idle() const {
  std::lock_guard<std::mutex> lk(core_->mu);
  return !core_->busy && core_->queue.empty();
}

} // namespace chorus
