// One sweep over the sizes by the peer threads of one process, in one process (chorus_bench.cpp)
// or as one node of several (node_run.cpp): what the threads share, one peer's sweep, and the
// checks both modes make before it.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <chorus/chorus.hpp>
#include "options.hpp"
#include "spin_barrier.hpp"

namespace chorus::bench {

// What the peer threads of this process share. Each slot is written by its own peer and read by
// slot 0 (or main) only after a barrier. Slots are the local peers taking part in the sweep: the
// sweep ranks in local mode, this node's members in global id order in multi-node mode.
struct Shared {
  Shared(uint32_t slots, int iters, uint32_t spin)
      : sync(slots, spin), elapsed(slots), wrong(slots), errors(slots), finish_errors(slots), iter_us(iters) {}
  SpinBarrier sync;
  std::vector<double> elapsed;        // seconds for the timed loop, per peer
  std::vector<std::size_t> wrong;     // wrong elements of the checked call, per peer
  std::vector<std::string> errors;    // first error of the current size, per peer
  std::vector<std::string> finish_errors;  // per peer, from finish() after the sweep
  std::vector<double> iter_us;        // rank 0: each timed iteration, us
  std::atomic<bool> failed{false};
  // Slot 0 prints the rows: always in local mode; in multi-node mode on the node of the sweep's
  // rank 0.
  bool prints = true;
  // Multi-node mode: each slot's global peer id, for messages (local mode names slots by rank).
  std::vector<uint32_t> ids;
  // Results (slot 0 writes them, main reads them after join). In multi-node mode wrong_total is
  // the total over every node (each node learns it), so every node's exit status agrees.
  std::size_t wrong_total = 0;
  double busbw_sum = 0;
  std::size_t rows = 0;
  std::vector<std::string> all_errors;
  // What ran the current size's op, as the library reports it to rank 0 (Peer::last_strategy).
  std::string strategy;
};

// --device cuda: GPU 0's device-to-device copy bandwidth (GB/s), measured by main once before the
// sweep (the ideal column).
inline double g_copy_gbps = 0;

// The sweep of one registered peer. `o` describes the sweep's participants (o.peers: the group's
// size under --group, every peer of every node in multi-node mode); `slot` indexes this peer's
// entries in `sh`, `rank` is its rank among the participants. In multi-node mode the row's time
// (max over every peer) and #wrong (sum) come from all_reduce calls of the library itself,
// outside the timed region, and every timed loop starts after a library barrier.
void run_sweep(uint32_t slot, uint32_t rank, Peer& peer, const Options& o, const std::vector<std::size_t>& sizes,
               Shared& sh, bool multi);

// Slot 0 moves the errors of the current size into all_errors (after a barrier). `name` names a
// slot's peer in the messages.
template <class Name>
void collect_errors(Shared& sh, Name name) {
  for (uint32_t p = 0; p < sh.errors.size(); ++p)
    if (!sh.errors[p].empty()) {
      sh.all_errors.push_back(name(p) + ": " + sh.errors[p]);
      sh.errors[p].clear();
    }
}

// Refuses sweeps whose buffers cannot fit in memory instead of dying half way. `need`: the bytes
// this machine would hold.
bool fits_in_memory(const Options& o, std::size_t need, const char* whose);

} // namespace chorus::bench
