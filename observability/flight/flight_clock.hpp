// The flight recorder's timestamps: the CPU's time-stamp counter where it ticks at a constant
// rate whatever the power state (x86 with constant_tsc and nonstop_tsc: about 10 ns a reading
// against 25 for the system clock, and the op path reads three per op), else the monotonic
// clock in ns. Readings become UNIX time only when a recorder is read.
#pragma once
#include <cstdint>
#include <ctime>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace chorus::flight_clock {

bool counter_ok();  // whether now() reads the time-stamp counter (decided once per process)

inline uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

inline uint64_t now() {
#if defined(__x86_64__)
  static const bool tsc = counter_ok();
  if (tsc) return __rdtsc();
#endif
  return monotonic_ns();
}

// Readings into UNIX ns (0 stays 0: not yet), along the line through the process's first reading
// and one taken when this is made, each paired with the system clock: exact to about 0.1 us.
class ToUnix {
 public:
  ToUnix();
  int64_t operator()(uint64_t reading) const;

 private:
  uint64_t reading0_;
  int64_t unix0_;
  long double per_tick_ = 1;
};

} // namespace chorus::flight_clock
