// --tag-output: one output stream of one process cut into lines, each handed back whole with
// "[RANK] " before it, so that one write puts it out and lines of different processes never mix.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace chorus::launch {

class LineTagger {
 public:
  // A line longer than this is handed back in pieces of this size (each tagged and ended with a
  // newline), so that a process printing without newlines cannot grow chorus-run's memory.
  static constexpr std::size_t kMaxLine = 64 * 1024;

  explicit LineTagger(uint32_t rank);
  // Takes what the process wrote; returns the lines it completed, tagged ("" when none).
  std::string feed(std::string_view bytes);
  // At the stream's end: what is left (a last line without its newline), tagged and ended with a
  // newline, or "".
  std::string finish();

 private:
  std::string tag_;
  std::string partial_;
  bool cut_ = false;  // the last piece handed back was a long line's, cut at kMaxLine
};

} // namespace chorus::launch
