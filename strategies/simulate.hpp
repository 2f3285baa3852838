// A deterministic, single-threaded executor of a full set of programs (one per peer) under exactly
// the round semantics of schedule.hpp, on int64 work buffers, used to check schedules in tests.
// It validates as it goes and stops at the first problem, reported in SimResult::error.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "strategies/schedule.hpp"

namespace chorus {

struct SimOptions {
  // false: recv_reduce (and the local reduce) is a (wrapping) sum. true: it is
  // dst = dst * 1000003 + received + 1
  // (wrapping), neither commutative nor associative, so peers that combine the same values in a
  // different order or grouping end with different results: all_reduce must still leave every
  // peer bit-identical (what floating point needs).
  bool ordered_combine = false;
  // false: a send's round ends once the send was received (memory semantics: the receiver reads
  // the sender's buffer). true: once it was posted (network semantics: the bytes are on the wire).
  bool buffered_sends = false;
  // Non-empty (one entry per peer): peers on the same node use memory semantics between them and
  // network semantics (buffered sends) with peers of other nodes, as the multi-node runtime does.
  std::vector<int> node_of;
};

struct SimResult {
  std::vector<std::vector<int64_t>> work;  // final work buffers (as far as it got, on error)
  std::string error;                       // empty when every program ran to completion cleanly
  // heard_from[p][q]: by the time p finished, a chain of messages led from q to p (true for p == q).
  std::vector<std::vector<bool>> heard_from;
  std::size_t messages = 0;       // sends executed
  std::size_t elements_sent = 0;  // sum of their counts
  // Latency-only length of the run: every message takes one time unit, everything else none.
  std::size_t makespan = 0;
  bool ok() const { return error.empty(); }
};

// programs[p] runs on peer p with work buffer initial_work[p] (their sizes define the valid
// regions). Reports: peer index out of range or self-messages, copy or reduce with a peer, regions out of
// range, overlapping copy source and destination, a receive or copy writing a region a send of
// the same round reads, count mismatches, unmatched sends or receives, and deadlock.
SimResult simulate(const std::vector<Program>& programs,
                   const std::vector<std::vector<int64_t>>& initial_work,
                   const SimOptions& options = {});

// Who hears from whom by the end (SimResult::heard_from: a chain of messages led from q to p),
// from the schedule's messages alone, without moving data (so for any count), under network
// semantics. Empty when the schedule cannot run to its end.
std::vector<std::vector<bool>> causal_reach(const std::vector<Program>& programs);

} // namespace chorus
