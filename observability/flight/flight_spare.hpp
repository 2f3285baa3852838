// The flight recorder's next file, made ahead: an unnamed file (O_TMPFILE) in the dump's
// directory, so that a failure's dump only writes it and gives it its name. Making a file is
// what a dump cost: ext4 scans for a free inode (for milliseconds after many deletions) under the
// directory's lock, and every process of a job fails at once, so each queued behind the others
// on the failing op's path, which the job's recovery (a shrink) waits for. A short-lived thread
// makes the spare when the recorder starts, and again kDumpEvery after each use (no failure's
// dump comes sooner) at the lowest priority; where the file system has no O_TMPFILE (NFS), none is
// made and a dump makes its file as before.
#pragma once
#include <chrono>
#include <memory>
#include <string>

namespace chorus {

// A failure writes at most one dump in this time (flight_recorder.cpp).
inline constexpr std::chrono::seconds kDumpEvery{1};

class FlightSpare {
 public:
  explicit FlightSpare(std::string dir);  // starts making the first spare
  ~FlightSpare();                         // closes a spare not taken
  FlightSpare(const FlightSpare&) = delete;
  FlightSpare& operator=(const FlightSpare&) = delete;

  // The spare's descriptor, now the caller's to write, name and close (write_flight_file); -1
  // when none is ready. The next one is made kDumpEvery later.
  int take();
  // Whether a spare is ready by `deadline` (tests; a dump never waits for one).
  bool wait_ready(std::chrono::steady_clock::time_point deadline) const;

 private:
  struct State;
  void refill(bool after_use);
  std::shared_ptr<State> st_;  // shared with the thread making a spare, which may outlive us
};

} // namespace chorus
