// What a Work handle shares with the op it names: done once, with the op's Status and what it
// gives back, and the callbacks waiting for that. The op's runner completes it exactly once.
#pragma once
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <chorus/work.hpp>
#include "core/wait.hpp"
#include "engine/lane.hpp"

namespace chorus {

struct WorkState {
  WaitWord done;                      // 1 once the fields below are final
  Status status;                      // how the op ended
  std::vector<Tensor> tensors;        // Work::result()
  std::vector<std::string> objects;   // Work::objects()
  std::optional<PeerId> source;       // Work::source(): a receive's sender
  // Runs the op on the calling thread when it has not started yet (Lane::runner); set before the
  // Work is handed out, never after. Work::wait() calls it before it sleeps.
  std::function<Lane::Claim()> run_here;
  // Says that someone waits for the op without running it (Work::wait_for, test, on_complete), so
  // that its lane's thread takes it as soon as it can (Lane::hurrier). Set with run_here.
  std::function<void()> hurry;

  // Sets the outcome (tensors and objects first, by whoever completes), wakes the waiters and
  // runs the callbacks, on this thread. Once only: a second call is a bug in chorus and is ignored.
  void complete(Status s);
  // Runs fn at once if done, else when complete() is called.
  void on_complete(std::function<void(const Status&)> fn);
  bool is_done() const { return done.value.load(std::memory_order_acquire) != 0; }

 private:
  std::mutex mu_;  // guards callbacks_ and the completion (done.value); never held while a callback runs
  std::vector<std::function<void(const Status&)>> callbacks_;
};

// The library's way into the public handle.
struct WorkAccess {
  static Work make(std::shared_ptr<WorkState> s) { return Work(std::move(s)); }
  static Work done(Status s) {  // an op that ended before it began (no handle, bad arguments)
    auto w = std::make_shared<WorkState>();
    w->complete(std::move(s));
    return Work(std::move(w));
  }
};

} // namespace chorus
