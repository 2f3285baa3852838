// A moment of the steady clock (which times waits and silences) as the wall clock's time of day,
// for messages a person matches against logs: "10:45:12.345 UTC".
#pragma once
#include <chrono>
#include <string>

namespace chorus {

std::string utc_time_of(std::chrono::steady_clock::time_point at);

} // namespace chorus
