// The clock and the median the benches of this folder report.
#pragma once
#include <algorithm>
#include <chrono>
#include <vector>

namespace chorus::bench {

using Clock = std::chrono::steady_clock;

// The middle value (of an even count, the mean of the two middle ones); 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) m = (m + *std::max_element(v.begin(), v.begin() + mid)) / 2;
  return m;
}

inline double us_since(Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
}

} // namespace chorus::bench
