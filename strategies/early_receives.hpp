// Which receives of a program may have their bytes land in the work buffer before the peer reaches
// them. Across nodes a frame arrives when its sender sends it, often while the receiver is still
// busy with an earlier round (an all-gather's data behind the reduce-scatter's); with no place
// offered, it lands in a pool buffer and is copied once more. Every round ends only once its sends
// were taken and its receives done, so from the start of round r on (after r's sends are posted)
// a receive's region is free when no step from there until the receive reads or writes it, save
// the sends of round r itself, which read what they send from wherever their pointer points.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "strategies/schedule.hpp"

namespace chorus {

struct EarlyReceive {
  uint32_t step;   // flat index in the peer's program (recv_copy or recv_reduce, count > 0)
  uint32_t round;  // offered once this round's sends are posted
  // Sends of that round read the region: they may be in flight still, so the memory the bytes land
  // in must be apart from theirs (the region's initial content still elsewhere), or the offer
  // waits for the next round (a copy; a reduction never lands on what it holds).
  bool sends_read;
};

// [peer]: its program's receives that may be offered early, ascending by round. A program longer
// than kEarlyMostSteps steps is not searched (the search is quadratic): none of its receives is early.
std::vector<std::vector<EarlyReceive>> early_receives(const std::vector<Program>& programs);
inline constexpr std::size_t kEarlyMostSteps = 1024;

} // namespace chorus
