// One ordered line of ops: tasks run one at a time, in the order they were handed in, on a thread
// the lane holds, so that whoever hands them in goes on. The lane takes its thread when work comes
// from those the process keeps (core/spare_threads.hpp) and gives it back after a while without
// any, or when the lane goes. A blocking call on an idle lane runs on its caller's thread
// instead (no hand-off, so a blocking op costs what it did before there were lanes), holding the
// lane meanwhile so that what is handed in after it waits its turn.
// A lane whose tasks are claimed by their waiters right after they were handed in (a blocking
// call made as an op and its wait, as torch.distributed makes every call) stops waking its thread
// for each one, which would cost the caller a system call and a race for the task; its thread
// then looks now and then (every millisecond) for a task nobody came for, and wakes at once again
// after running one (lane.cpp says when exactly).
// A waiter whose op has others ahead of it (a burst of non-blocking ops waited one by one) drains
// the lane itself once it is free, rather than be woken once per op (lane.cpp).
// A Peer handle's collectives share one lane (call order is op order); its send/recv have one per
// (direction, other peer, tag), so that an exchange of non-blocking sends and receives meets.
#pragma once
#include <chrono>
#include <functional>
#include <memory>

namespace chorus {

class Lane {
 public:
  using Task = std::function<void()>;
  struct Core;

  // A thread with nothing to do for `idle` goes back to the kept ones (the next task takes
  // another). `lazy_age`: how long a lazy lane's thread leaves a task to its waiter (0: the
  // defaults, 1 ms, and 200 us where a waiter drains the lane; tests set both long). `quick`: how
  // soon after its hand-in a claim counts as quick (0: the default, 50 us; tests that let the
  // thread settle first set it long).
  explicit Lane(std::chrono::milliseconds idle = std::chrono::milliseconds(2000),
                std::chrono::milliseconds lazy_age = std::chrono::milliseconds(0),
                std::chrono::microseconds quick = std::chrono::microseconds(0));
  ~Lane();  // queued tasks still run (each holds what it needs); the thread then goes back
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;

  // Runs `t` after every task handed in before it. Never blocks. `key` names the task for
  // run_now() (nullptr: none).
  void submit(Task t, const void* key = nullptr);
  // A call that runs the task `key` on the calling thread if it is still queued (and returns true):
  // whoever waits for a task's outcome runs it itself rather than hand it to the lane's thread and
  // be woken back (two thread hand-offs, ~20 us each on a busy host). With tasks ahead of it, it
  // runs those first, after waiting for the lane to be free if a task runs; where its task runs
  // already, with others queued, it returns false, leaving what follows to the waits to come.
  // Either way the lane turns lazy. A thread inside another lane's task only runs its task first
  // in line on a free lane. Valid after the Lane is gone.
  // `stuck`: the task is queued and the calling thread holds the lane (it runs one of the lane's
  // tasks, or a callback of one): the task cannot start before the calling thread returns, so a
  // wait for it here would never end.
  enum class Claim { ran, left, stuck };
  std::function<Claim()> runner(const void* key) const;
  // A call for whoever waits for the task `key` without running it (a wait with a limit, a poll, a
  // callback): a lazy lane (below) turns eager, so that its thread takes the task as soon as it can.
  // Valid after the Lane is gone.
  std::function<void()> hurrier(const void* key) const;

  // The lane held by the calling thread while it runs a task itself (see enter()).
  class Hold {
   public:
    Hold() = default;
    Hold(Hold&& o) noexcept : core_(std::move(o.core_)), acquired_(o.acquired_) {}
    Hold& operator=(Hold&&) = delete;
    ~Hold();
    explicit operator bool() const { return core_ != nullptr; }

   private:
    friend class Lane;
    Hold(std::shared_ptr<Core> c, bool acquired) : core_(std::move(c)), acquired_(acquired) {}
    std::shared_ptr<Core> core_;
    bool acquired_ = false;  // false: the thread held it already (a task of the lane, or an op inside one)
  };
  // True (a Hold) where the calling thread may run its task now: nothing is queued or running, or
  // the thread holds the lane already (it runs one of the lane's tasks, or an op that calls
  // another op of the same handle: waiting for the lane would wait for itself). Empty: hand the
  // task in with submit() and wait for it.
  Hold enter();
  // Nothing queued or running (a lane that may be dropped from its owner's table).
  bool idle() const;
  // False while the lane leaves tasks with a runner to their waiters (see above).
  bool wakes_at_once() const;
  // Waiters sleeping until the lane is free, to drain it (a hook for tests).
  int waiters_to_drain() const;
  // How many times the lane's threads went to sleep (a hook for tests: one that went back to sleep
  // after a hand-in woke it has seen that hand-in).
  int thread_sleeps() const;
  // While paused, the lane's thread takes no task (a hook for tests: a waiter then always finds its
  // task queued, where otherwise it races the thread for it). `wake`: let go with a wake-up of the
  // thread (false: it takes tasks from its next look on, as it would have without the pause).
  void pause_thread(bool paused, bool wake = true);

 private:
  std::shared_ptr<Core> core_;  // shared with the lane's thread, which may outlive the Lane
};

} // namespace chorus
