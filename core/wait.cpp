#include "core/wait.hpp"

#include "core/futex.hpp"
#include "core/settings.hpp"

#include <algorithm>
#include <climits>
#include <thread>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CHORUS_PAUSE() _mm_pause()
#else
#define CHORUS_PAUSE() std::this_thread::yield()
#endif

namespace chorus {

std::chrono::nanoseconds spin_budget() {
  static const std::chrono::nanoseconds budget = tuned_micros(SettingId::spin_us);
  return budget;
}

std::chrono::nanoseconds socket_spin_budget() {
  static const std::chrono::nanoseconds budget = tuned_micros(SettingId::socket_spin_us);
  return budget;
}

std::chrono::nanoseconds yield_budget() {
  static const std::chrono::nanoseconds budget = tuned_micros(SettingId::yield_us);
  return budget;
}

unsigned hardware_threads() {
  static const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return cores;
}

std::chrono::nanoseconds spin_budget_for(unsigned threads) {
  return threads <= hardware_threads() ? spin_budget() : std::chrono::nanoseconds(0);
}

void WaitWord::wake() { futex::wake(&value, futex::kAll, futex::Scope::process); }

constinit thread_local bool tl_leads_poller = false;

void signal_eventfd(int fd) {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t r = ::write(fd, &one, sizeof one);  // an eventfd: cannot block or fail short
}

void WaitWord::sleep(uint32_t seen, Clock::time_point until) {
  auto now = Clock::now();
  if (now >= until) return;
  sleepers.fetch_add(1, std::memory_order_seq_cst);
  if (value.load(std::memory_order_seq_cst) == seen) futex::wait(&value, seen, until - now, futex::Scope::process);
  sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

Patience patience_for(unsigned threads) {
  if (threads <= hardware_threads()) return {spin_budget(), std::chrono::nanoseconds(0)};
  return {std::chrono::nanoseconds(0), yield_budget()};
}

bool WaitWord::wait_at_least(uint32_t target, Clock::time_point deadline, Patience p) {
  if (p.yield.count() > 0) {
    const auto yield_end = std::min(deadline, Clock::now() + p.yield);
    do {
      if (value.load(std::memory_order_acquire) >= target) return true;
      std::this_thread::yield();
    } while (Clock::now() < yield_end);
  }
  return wait_at_least(target, deadline, p.spin);
}

bool WaitWord::wait_at_least(uint32_t target, Clock::time_point deadline,
                             std::chrono::nanoseconds spin) {
  if (value.load(std::memory_order_acquire) >= target) return true;
  auto spin_end = Clock::now() + spin;
  for (unsigned i = 1;; ++i) {
    if (value.load(std::memory_order_acquire) >= target) return true;
    CHORUS_PAUSE();
    if ((i & 63) == 0) {
      if (Clock::now() >= spin_end) break;
      if ((i & 1023) == 0) std::this_thread::yield();  // let a descheduled peer run on 2 cores
    }
  }
  for (;;) {
    uint32_t v = value.load(std::memory_order_acquire);
    if (v >= target) return true;
    auto now = Clock::now();
    if (now >= deadline) return false;
    auto slice = std::min<Clock::duration>(deadline - now, std::chrono::milliseconds(50));
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (value.load(std::memory_order_seq_cst) == v) futex::wait(&value, v, slice, futex::Scope::process);
    sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

} // namespace chorus
