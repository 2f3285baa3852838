// Ordering the threads of a test by events instead of sleeps: a count that threads raise and wait
// on with a deadline, and the local server's enter hook (LocalServerCore::set_enter_hook) counting
// the op requests a Runtime's server has taken in, so a test acts once a call is known to wait
// there.
#pragma once
#include <chrono>
#include <cstdint>

#include <chorus/runtime.hpp>
#include "actors/runtime_impl.hpp"
#include "core/wait.hpp"

namespace chorus::testing {

// A count of events, raised by any thread; waits end when it reaches a target or at a deadline.
class EventCount {
 public:
  void raise() { word_.set(word_.value.fetch_add(1) + 1); }
  // True once at least `n` events happened; false when `within` passed first.
  [[nodiscard]] bool wait_for(uint32_t n, std::chrono::milliseconds within = std::chrono::seconds(10)) {
    return word_.wait_at_least(n, Clock::now() + within);
  }
  uint32_t count() const { return word_.value.load(); }

 private:
  WaitWord word_;
};

// Raises `entered` for every op request (collective, send or recv) that rt's local server has
// taken in. Call it before any peer of rt calls an op; `entered` must outlive rt's ops.
inline void count_server_entries(Runtime& rt, EventCount& entered) {
  RuntimeAccess::impl(rt).core->set_enter_hook([&entered] { entered.raise(); });
}

} // namespace chorus::testing
