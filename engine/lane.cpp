#include "engine/lane.hpp"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <system_error>

#include <pthread.h>

#include "core/spare_threads.hpp"
#include "core/wait.hpp"  // chorus::Clock

namespace chorus {

// Waking the lane's thread for a task costs its submitter a system call and, on a busy host, a
// race with the caller who waits for the task at once and would run it itself (a blocking call from
// Python is a non-blocking op and its wait): about 3 us of a 1 KiB op's 8 from torch.distributed,
// measured. So a lane whose tasks are claimed by their waiters right after they were handed in
// turns lazy: it hands tasks that have a waiter's runner to no thread at once, and its thread
// looks every kLazyAge for one nobody came for, which it runs, turning eager again. A task
// claimed kQuick or later after it was handed in (its caller overlapped it with work of its own)
// turns the lane eager as well: such a caller wants the op running meanwhile. Both ages count
// from when the lane was last free, if later than the hand-in: a task queued behind others is not
// late for having waited its turn.
//
// Ops issued in a burst and then waited one by one (K async ops, then K waits) would cost a
// wake-up of the waiter per op if the lane's thread ran them all: on a busy host each such wake
// takes a core from the lane's thread or from its partner's. So a waiter whose op has others
// ahead of it (queued, or the one running) drains the lane instead: the lane turns lazy, the lane's
// thread finishes what it runs and lets the waiter run what follows, up to its own op, on its own
// thread; the waits after that find their ops first in line and run them at once (one wake-up in
// all, not one per op).
constexpr auto kQuick = std::chrono::microseconds(50);
constexpr auto kLazyAge = std::chrono::milliseconds(1);
constexpr int kQuickClaimsToLazy = 4;
// A lane turned lazy by a waiter that drains it leaves a task to the waiters that long after the
// lane was last free, then takes it: long enough for a woken waiter to come for the next op of a
// burst, short enough that a caller who overlapped its ops with work ("issue the next, wait the
// last, compute") loses little when it does not come.
constexpr auto kDrainGrace = std::chrono::microseconds(200);

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
  bool draining = false;        // lazy because a waiter drains the lane: kDrainGrace, not kLazyAge
  bool thread_paused = false;   // the lane's thread takes no task (pause_thread, for tests) until closed
  int claimants = 0;            // waiters sleeping on cv until the lane is free, to drain it
  int quick_claims = 0;         // tasks claimed by their waiters within kQuick, in a row (capped)
  Clock::time_point last_used;  // a task last ran, on the lane's thread or a waiter's
  std::chrono::milliseconds idle{0};
  Clock::duration lazy_age = kLazyAge;
  Clock::duration drain_grace = kDrainGrace;
  Clock::duration quick = kQuick;
  int thread_sleeps = 0;  // see Lane::thread_sleeps
  // How long the lane's thread leaves a task with a waiter to it, once the lane is free.
  Clock::duration leave_for() const { return draining ? drain_grace : lazy_age; }
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
  if (c.busy || c.queue.empty() || (c.thread_paused && !c.closed)) return false;
  const auto& front = c.queue.front();
  if (!front.key) return true;
  if (!c.lazy) {
    c.quick_claims = 0;  // taken before its waiter came: the lane's ops run beside their callers
    return true;
  }
  until = std::max(front.at, c.last_used) + c.leave_for();
  if (Clock::now() < until) return false;
  c.lazy = c.draining = false;  // nobody came for it: wake the thread at once again
  c.quick_claims = 0;
  return true;
}

// Under `lk` (held again on return, a throw's included): pops the first queued task and runs it
// with the lock let go, the lane busy and held by this thread meanwhile, whichever thread this is
// (the lane's own, or a waiter's).
void run_front(Lane::Core& c, std::unique_lock<std::mutex>& lk) {
  struct Ran {
    Lane::Core& c;
    std::unique_lock<std::mutex>& lk;
    Lane::Task t;
    ~Ran() {
      t = nullptr;  // what the task held goes now, not under the lock (it may own the Lane)
      pop_held();
      lk.lock();
      c.busy = false;
      c.last_used = Clock::now();
    }
  } ran{c, lk, std::move(c.queue.front().task)};
  c.queue.pop_front();
  c.busy = true;
  lk.unlock();
  push_held(&c);
  ran.t();
}

void run_lane(const std::shared_ptr<Lane::Core>& c) {
  pthread_setname_np(pthread_self(), "chorus-lane");  // a spare thread's name again once it ends
  std::unique_lock<std::mutex> lk(c->mu);
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
      if (c->lazy) wake = std::min(wake, now + c->leave_for());
      ++c->thread_sleeps;
      c->cv.wait_until(lk, wake);
      continue;
    }
    run_front(*c, lk);
    if (c->claimants > 0) c->cv.notify_all();  // a waiter drains what follows
  }
  c->thread_running = false;
}

void ensure_thread(const std::shared_ptr<Lane::Core>& c) {
  if (c->thread_running) {
    c->cv.notify_one();
    return;
  }
  // Its idle time counts from here: set when the thread starts running, which may be much later
  // on a busy host, it would make the lane look just used to a waiter's claim (a late claim
  // would pass for a quick one).
  c->last_used = std::max(c->last_used, Clock::now());
  try {
    // A thread the process keeps (core/spare_threads.hpp), as every lane's is: a program that
    // tags each message by its step makes a send/recv lane per message, dropped once idle, whose
    // thread then serves the next lane rather than end. It holds the core; its job ends by itself
    // (idle, or closed and empty).
    run_on_spare_thread([c] { run_lane(c); }).detach();
  } catch (const std::system_error&) {
    // No thread to be had now: what is queued stays, for a waiter's runner to run, and the next
    // hand-in or wait without running (hurry) tries again. (Thrown, it would leave the lane
    // believing in a thread that never came, or end the program from Hold's destructor.)
    return;
  }
  c->thread_running = true;
}

// Under c->mu, after a task ran on a caller's thread: the queue's next task to whoever runs it. A
// lazy lane's thread looks by itself (a wake-up now would only find the task too young), and a
// waiter that drains the lane is woken instead.
void pass_on(const std::shared_ptr<Lane::Core>& c) {
  if (c->claimants > 0) c->cv.notify_all();
  if (c->queue.empty() || (c->lazy && c->thread_running && c->queue.front().key)) return;
  ensure_thread(c);
}

// Under c.mu, after the lane may have turned lazy: a thread asleep with an eager lane's deadline
// (its idle time, 2 s) is woken to look again at the lazy one (kLazyAge, or the drain's grace),
// since a lazy lane's hand-in wakes no one.
void wake_if_turned_lazy(Lane::Core& c, bool was_lazy) {
  if (!was_lazy && c.lazy && c.thread_running) c.cv.notify_all();
}

// Under c->mu: a waiter drains the lane from now on.
void drain_from_now(const std::shared_ptr<Lane::Core>& c) {
  const bool was_lazy = c->lazy;
  c->lazy = c->draining = true;
  c->quick_claims = kQuickClaimsToLazy;
  wake_if_turned_lazy(*c, was_lazy);
}

// Under c->mu: where the task `key` is queued (queue.end(): not queued: it runs or ran).
std::deque<Lane::Core::Queued>::iterator find_key(Lane::Core& c, const void* key) {
  return std::find_if(c.queue.begin(), c.queue.end(), [key](const Lane::Core::Queued& q) { return q.key == key; });
}

// Under c->mu: someone waits for the task `key` without running it (the lane is busy, the task is
// not first in line, or the wait has a limit, polls or registered a callback): a lazy lane turns
// eager, so that its thread takes the task as soon as it can rather than a millisecond after it came.
// A lane with no thread (none could be started: ensure_thread) tries again.
void hurry(const std::shared_ptr<Lane::Core>& c, const void* key) {
  if (!c->lazy && c->thread_running) return;
  for (const auto& q : c->queue) {
    if (q.key != key) continue;
    c->lazy = c->draining = false;
    c->quick_claims = 0;
    ensure_thread(c);
    return;
  }
}
} // namespace

Lane::Lane(std::chrono::milliseconds idle, std::chrono::milliseconds lazy_age, std::chrono::microseconds quick)
    : core_(std::make_shared<Core>()) {
  core_->idle = idle;
  if (lazy_age.count() > 0) core_->lazy_age = core_->drain_grace = lazy_age;
  if (quick.count() > 0) core_->quick = quick;
}

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

std::function<Lane::Claim()> Lane::runner(const void* key) const {
  return [weak = std::weak_ptr<Core>(core_), key] {
    auto c = weak.lock();  // the lane's core outlives the Lane while tasks are queued
    if (!c) return Claim::left;
    if (tl_held.has(c.get())) {  // this thread runs one of the lane's tasks: not now, and not before it returns
      std::lock_guard<std::mutex> lk(c->mu);
      return find_key(*c, key) != c->queue.end() ? Claim::stuck : Claim::left;
    }
    // A thread inside another lane's task does not wait for this lane to be free (that lane's
    // tasks wait for it meanwhile): it sleeps for its task as before, the lane hurried.
    const bool may_drain = tl_held.n == 0;
    std::unique_lock<std::mutex> lk(c->mu);
    for (;;) {
      auto at = find_key(*c, key);
      const bool first_on_free_lane = at == c->queue.begin() && at != c->queue.end() && !c->busy;
      if (first_on_free_lane) break;  // run it
      if (!may_drain || c->queue.empty() || (at == c->queue.end() && !c->busy)) {
        hurry(c, key);  // its waiter sleeps until the lane's thread has run it
        return Claim::left;
      }
      // Others are ahead of it: this waiter runs the lane from the moment it is free.
      drain_from_now(c);
      if (at == c->queue.end()) return Claim::left;  // it runs now: wait for it, then run what follows
      if (!c->busy) break;                     // tasks ahead, none running: run them, then it
      ++c->claimants;
      c->cv.wait_until(lk, Clock::now() + std::chrono::seconds(1));  // the running task is bounded
      --c->claimants;
    }
    // Run the queue up to and including `key`, in order, on this thread.
    for (bool last = false; !last;) {
      const auto now = Clock::now();
      auto& front = c->queue.front();
      last = front.key == key;
      if (last && c->queue.size() == 1) {  // with more behind it, the drain goes on: stay lazy
        const bool quick = now - std::max(front.at, c->last_used) < c->quick;
        const bool was_lazy = c->lazy;
        c->quick_claims = quick ? std::min(c->quick_claims + 1, kQuickClaimsToLazy) : 0;
        c->lazy = quick && c->quick_claims >= kQuickClaimsToLazy;
        c->draining = false;
        wake_if_turned_lazy(*c, was_lazy);
      }
      c->last_used = now;
      try {
        run_front(*c, lk);
      } catch (...) {  // (an op's task catches its own; this keeps the lane usable regardless)
        pass_on(c);
        throw;
      }
    }
    pass_on(c);
    return Claim::ran;
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
  core_->last_used = Clock::now();
  pass_on(core_);
}

bool Lane::wakes_at_once() const {
  std::lock_guard<std::mutex> lk(core_->mu);
  return !core_->lazy;
}

int Lane::waiters_to_drain() const {
  std::lock_guard<std::mutex> lk(core_->mu);
  return core_->claimants;
}

int Lane::thread_sleeps() const {
  std::lock_guard<std::mutex> lk(core_->mu);
  return core_->thread_sleeps;
}

void Lane::pause_thread(bool paused, bool wake) {
  std::lock_guard<std::mutex> lk(core_->mu);
  core_->thread_paused = paused;
  if (!paused && wake) core_->cv.notify_all();
}

bool Lane::idle() const {
  std::lock_guard<std::mutex> lk(core_->mu);
  return !core_->busy && core_->queue.empty();
}

} // namespace chorus
