// A schedule is the pure description of how one collective op moves data: for every peer, an
// ordered list of rounds, each a set of sends, receives and local copies over that peer's
// "work buffer". The same schedule drives the in-memory executor (peers of one process) and,
// later, the network executor (global clients), so it names peers and element ranges only.
//
// Work buffer layout (elements of the op's dtype; `count` = the per-peer element count of the call,
// n = group size):
//   all_reduce      [0, count)          initially my input; finally the reduction, on every peer
//                   [count, 2*count)    scratch (undefined at first), for schedules that fold
//                                       elsewhere before writing the result (oneshot)
//   reduce          [0, count)          initially my input; finally the reduction on `root`
//   broadcast       [0, count)          initially the data on `root`; finally the data everywhere
//   all_gather      [0, n*count)        block p initially my input (p = my index); finally all blocks
//   reduce_scatter  [0, n*count)        initially my input; finally block p holds the reduction of block p
//   gather          [0, n*count)        block p initially my input; finally all blocks on `root`
//   scatter         [0, n*count)        initially the data on `root`; finally block p on peer p
//   all_to_all      [0, 2*n*count)      send area [0, n*count): my input, block j goes to peer j;
//                                       recv area [n*count, 2*n*count): block j comes from peer j
//   barrier         empty               only zero-element messages; every peer must (transitively)
//                                       hear from every other before it finishes
//
// Execution semantics of one round, for one peer (the executor and the test simulator obey these):
//   1. post every `send` of the round, in order (the receiver sees the region's content as it is now);
//   2. perform every `recv_reduce`, `recv_copy`, `copy` and `reduce` of the round, in order: a receive
//      waits for the matching send, which is the k-th send from that peer to me matching my k-th
//      receive from that peer (FIFO per ordered pair), with equal element counts;
//   3. wait until every send posted in step 1 has been received (a rendezvous: the sender may not
//      touch a sent region before the receiver has read it).
// Rules a valid schedule keeps: within a round, no receive, copy or reduce writes a region that a send of
// the same round reads; every send has exactly one matching receive; no deadlock under the
// semantics above; every peer's final region content equals the reference result.
// recv_reduce computes  dst = dst (op) received  with dst's current content; avg is reduced as sum
// and divided by n by the executor at the end, so schedules never divide.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <chorus/strategy.hpp>
#include <chorus/types.hpp>

namespace chorus {

enum class StepKind : uint8_t {
  send,         // expose work[offset, offset+count) to `peer`
  recv_reduce,  // work[offset, +count) = work[...] (op) data received from `peer`
  recv_copy,    // work[offset, +count) = data received from `peer`
  copy,         // work[offset, +count) = work[src_offset, +count)   (local, peer = -1)
  reduce,       // work[offset, +count) = work[offset, +count) (op) work[src_offset, +count)   (local)
};

struct Step {
  StepKind kind;
  int peer;             // the other side, an index in [0, n); -1 for copy and reduce
  std::size_t offset;   // first element of the region this step reads (send) or writes (others)
  std::size_t count;    // elements; 0 is allowed (pure synchronisation)
  std::size_t src_offset = 0;  // copy and reduce only: first element read
  bool operator==(const Step&) const = default;
};

struct Round {
  std::vector<Step> steps;
};

using Program = std::vector<Round>;

// Pipelined algorithms cut their data into chunks of about this many bytes (the planner's
// chunking, strategies/planner.hpp's plan_schedule; the default of ScheduleParams).
inline constexpr std::size_t kPipelineChunkBytes = 512 * 1024;

struct ScheduleParams {
  OpKind op;           // any OpKind except send and recv
  Strategy strategy;
  int n;               // group size, >= 1
  int root = 0;        // reduce, broadcast, gather, scatter
  std::size_t count;   // per-peer element count as described above (0 allowed)
  std::size_t elem_size = 4;  // bytes per element; lets ring/tree pick chunk sizes (pipelining)
  std::size_t chunk_bytes = kPipelineChunkBytes;  // pipelined algorithms' parts, about this many bytes
};

// Elements in one peer's work buffer for this op (see the table above).
std::size_t work_elements(OpKind op, int n, std::size_t count);

// The program of every peer: result[i] is peer i's program. Deterministic.
std::vector<Program> make_schedule(const ScheduleParams& p);

// all_reduce, reduce, broadcast, all_gather or reduce_scatter over peers on nodes (node_of[r]: rank
// r's node; ranks of a node need not be contiguous): within each node through its leader (the root
// on the root's node, else the lowest rank), among the leaders with p.strategy (all_reduce, reduce,
// broadcast) or directly (strategies/hierarchical.cpp).
std::vector<Program> hierarchical_schedule(const ScheduleParams& p, const std::vector<int>& node_of);

} // namespace chorus
