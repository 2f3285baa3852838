// Writes the flight recorder's files. A failed op's dump is written off the op's path, by one
// thread of the process (started with its first dump): creating a file can take a millisecond
// where several processes fail at once (they queue on the directory), and the failure should
// reach the caller (and a shrink begin) without waiting for it. What a dump holds is taken when
// the op fails; only the formatting and the file wait. Runtime shutdown and the process's exit
// flush what is still queued.
#pragma once
#include <chrono>
#include <string>

#include <chorus/result.hpp>
#include "core/log.hpp"
#include "observability/flight/flight_row.hpp"

namespace chorus {

// Writes `d` to `path` now (beside it first, then renamed: a reader never sees half a file) and
// returns the path.
Result<std::string> write_flight_file(const std::string& path, const FlightDump& d);

// Queues `d` for `path`; the writer then logs where it went (warn, op, at `where`).
void write_flight_file_later(std::string path, FlightDump d, LogWhere where);

// Waits until every dump queued before the call is written, or the deadline (false).
bool flush_flight_files(std::chrono::steady_clock::time_point deadline);

} // namespace chorus
