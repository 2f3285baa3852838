#include "strategies/early_receives.hpp"

#include <algorithm>

namespace chorus {

namespace {

bool is_receive(const Step& s) { return s.kind == StepKind::recv_copy || s.kind == StepKind::recv_reduce; }

// Whether step s reads or writes elements of [begin, end).
bool touches(const Step& s, std::size_t begin, std::size_t end) {
  auto hits = [&](std::size_t at) { return s.count > 0 && at < end && begin < at + s.count; };
  if (hits(s.offset)) return true;
  return (s.kind == StepKind::copy || s.kind == StepKind::reduce) && hits(s.src_offset);
}

} // namespace

std::vector<std::vector<EarlyReceive>> early_receives(const std::vector<Program>& programs) {
  std::vector<std::vector<EarlyReceive>> early(programs.size());
  for (std::size_t p = 0; p < programs.size(); ++p) {
    const Program& prog = programs[p];
    std::size_t steps = 0;
    for (const Round& round : prog) steps += round.steps.size();
    if (steps > kEarlyMostSteps) continue;
    uint32_t flat = 0;
    for (std::size_t rk = 0; rk < prog.size(); ++rk) {
      for (std::size_t i = 0; i < prog[rk].steps.size(); ++i) {
        const Step& k = prog[rk].steps[i];
        const uint32_t at = flat + static_cast<uint32_t>(i);
        if (!is_receive(k) || k.count == 0) continue;
        const std::size_t b = k.offset, e = k.offset + k.count;
        // Its own round: any other step touching the region keeps it where it is (the executor
        // offers at the step, as for any receive).
        bool clash = false;
        for (std::size_t j = 0; j < prog[rk].steps.size() && !clash; ++j) clash = j != i && touches(prog[rk].steps[j], b, e);
        if (clash) continue;
        // Down through the earlier rounds: one whose receives, copies or reductions touch the
        // region ends the search (the region is free from the next round on); one whose sends
        // read it is the earliest.
        std::size_t from = rk;
        bool read = false;
        while (from > 0) {
          bool written = false, sent = false;
          for (const Step& s : prog[from - 1].steps)
            if (touches(s, b, e)) (s.kind == StepKind::send ? sent : written) = true;
          if (written) break;
          --from;
          if (sent) {
            read = true;
            break;
          }
        }
        early[p].push_back({at, static_cast<uint32_t>(from), read});
      }
      flat += static_cast<uint32_t>(prog[rk].steps.size());
    }
    std::stable_sort(early[p].begin(), early[p].end(),
                     [](const EarlyReceive& a, const EarlyReceive& b) { return a.round < b.round; });
  }
  return early;
}

} // namespace chorus
