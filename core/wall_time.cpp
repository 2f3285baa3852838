#include "core/wall_time.hpp"

#include <cstdio>
#include <ctime>

namespace chorus {

std::string utc_time_of(std::chrono::steady_clock::time_point at) {
  const auto ago = std::chrono::steady_clock::now() - at;
  const auto wall = std::chrono::system_clock::now() - std::chrono::duration_cast<std::chrono::system_clock::duration>(ago);
  const std::time_t secs = std::chrono::system_clock::to_time_t(wall);
  const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(wall.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char text[32];
  std::snprintf(text, sizeof text, "%02d:%02d:%02d.%03lld UTC", tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<long long>(millis));
  return text;
}

} // namespace chorus
