#include "engine/lane.hpp"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace chorus {

struct Lane::Core {
  std::mutex mu;
  std::condition_variable cv;  // work came, the lane was let go, or the Lane is gone
  struct Queued {
    const void* key;
    Task task;
  };
  std::deque<Queued> queue;
  bool busy = false;            // a task runs (on the lane's thread or a caller's)
  bool thread_running = false;  // the lane's thread exists
  bool closed = false;          // the Lane is gone: the thread ends once the queue is empty
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

void run_lane(std::shared_ptr<Lane::Core> c) {
  std::unique_lock<std::mutex> lk(c->mu);
  for (;;) {
    // Sleeps while a caller holds the lane or nothing is queued, at most `idle` at a time.
    c->cv.wait_for(lk, c->idle, [&] { return (!c->busy && !c->queue.empty()) || (c->closed && c->queue.empty()); });
    if (!c->busy && !c->queue.empty()) {
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
      continue;
    }
    // Idle that long, or closed, with nothing queued: end (the next task starts a thread). Work
    // queued behind a caller that holds the lane keeps it: the caller's release wakes it.
    if (c->queue.empty()) {
      c->thread_running = false;
      return;
    }
  }
}

void ensure_thread(const std::shared_ptr<Lane::Core>& c) {
  if (c->thread_running) {
    c->cv.notify_one();
    return;
  }
  c->thread_running = true;
  std::thread(run_lane, c).detach();  // holds the core; ends by itself (idle, or closed and empty)
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
  core_->queue.push_back({key, std::move(t)});
  ensure_thread(core_);  // where a caller holds the lane, the thread waits for its release
}

std::function<bool()> Lane::runner(const void* key) const {
  return [weak = std::weak_ptr<Core>(core_), key] {
    auto c = weak.lock();  // the lane's core outlives the Lane while tasks are queued
    if (!c || tl_held.has(c.get())) return false;  // this thread runs one of the lane's tasks: not now
    Lane::Task t;
    {
      std::lock_guard<std::mutex> lk(c->mu);
      if (c->busy || c->queue.empty() || c->queue.front().key != key) return false;
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

bool Lane::idle() const {
  std::lock_guard<std::mutex> lk(core_->mu);
  return !core_->busy && core_->queue.empty();
}

} // namespace chorus
