// Waiting for what has no blocking form: a stream's event (cudaEventQuery) or an NCCL call in
// progress (ncclCommGetAsyncError). Everything that can be waited on by a wake-up (a device actor's
// mailbox, a task's result) waits on a WaitWord instead (cuda/task_queue.hpp); these few must look.
// The one pattern: look in a spin for a while (small GPU work finishes in microseconds), then look
// every `nap` until the deadline, so that a hung kernel or a rank that never comes cannot hold a
// device actor forever.
#pragma once
#include <chrono>
#include <string>
#include <thread>

#include <chorus/status.hpp>

#include "core/wait.hpp"

namespace chorus::gpu {

struct PollPace {
  std::chrono::microseconds spin;  // looking without pause at first
  std::chrono::microseconds nap;   // then the pause between looks
};

// Ok once `done()` is true; the error of `stop()` (called between looks once the spin is over:
// an asynchronous NCCL error, another rank giving up) if it returns one; else, once `deadline`
// passes, a timeout whose message is `late`.
template <class Done, class Stop>
Status poll_until(Done&& done, Stop&& stop, Clock::time_point deadline, PollPace pace, const char* late) {
  const auto spin_end = Clock::now() + pace.spin;
  while (Clock::now() < spin_end)
    if (done()) return Status::ok();
  for (;;) {
    if (done()) return Status::ok();
    if (Clock::now() >= deadline) return {Errc::timeout, late};
    if (Status s = stop(); !s.is_ok()) return s;
    std::this_thread::sleep_for(pace.nap);
  }
}

} // namespace chorus::gpu
