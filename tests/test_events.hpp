// Ordering the threads of a test by events instead of sleeps: a count that threads raise and wait
// on with a deadline, and the local server's enter hook (LocalServerCore::set_enter_hook) counting
// the op requests a Runtime's server has taken in, so a test acts once a call is known to wait
// there.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include <chorus/runtime.hpp>
#include "runtime/runtime_impl.hpp"
#include "core/wait.hpp"

namespace chorus::testing {

// A count of events, raised by any thread; waits end when it reaches a target or at a deadline.
// A waiter may return (and the count go out of scope) as soon as the value rises, while the
// raising thread is still inside WaitWord::set, waking sleepers: the count's end waits for every
// raise under way to be out (a detached lane thread raised one after its test had returned: TSan).
class EventCount {
 public:
  EventCount() = default;
  EventCount(const EventCount&) = delete;
  EventCount& operator=(const EventCount&) = delete;
  ~EventCount() {
    while (raising_.load() != 0) std::this_thread::yield();
  }
  void raise() {
    raising_.fetch_add(1);
    word_.set(word_.value.fetch_add(1) + 1);
    raising_.fetch_sub(1);
  }
  // True once at least `n` events happened; false when `within` passed first.
  [[nodiscard]] bool wait_for(uint32_t n, std::chrono::milliseconds within = std::chrono::seconds(10)) {
    return word_.wait_at_least(n, Clock::now() + within);
  }
  uint32_t count() const { return word_.value.load(); }

 private:
  WaitWord word_;
  std::atomic<uint32_t> raising_{0};
};

// Raises `entered` for every op request (collective, send or recv) that rt's local server has
// taken in. Call it before any peer of rt calls an op; `entered` must outlive rt's ops.
inline void count_server_entries(Runtime& rt, EventCount& entered) {
  RuntimeAccess::impl(rt).core->set_enter_hook([&entered] { entered.raise(); });
}

} // namespace chorus::testing
