#include "observability/flight/flight_clock.hpp"

#include <chrono>
#include <fstream>
#include <string>

namespace chorus::flight_clock {

namespace {

int64_t unix_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Anchor {
  uint64_t reading;
  int64_t unix;
};

const Anchor& first() {
  static const Anchor a{now(), unix_ns()};
  return a;
}

// Taken at start-up so that the first anchor comes before any recorded op.
[[maybe_unused]] const Anchor& g_first = first();

} // namespace

bool counter_ok() {
#if defined(__x86_64__)
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("flags", 0) == 0)
      return line.find(" constant_tsc") != std::string::npos && line.find(" nonstop_tsc") != std::string::npos;
#endif
  return false;
}

ToUnix::ToUnix() {
  const Anchor& a = first();
  const Anchor b{now(), unix_ns()};
  reading0_ = a.reading;
  unix0_ = a.unix;
  if (b.reading > a.reading)
    per_tick_ = static_cast<long double>(b.unix - a.unix) / static_cast<long double>(b.reading - a.reading);
}

int64_t ToUnix::operator()(uint64_t reading) const {
  if (reading == 0) return 0;
  return unix0_ + static_cast<int64_t>((static_cast<long double>(reading) - static_cast<long double>(reading0_)) * per_tick_);
}

} // namespace chorus::flight_clock
