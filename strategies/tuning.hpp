// The tuning module: which strategy an op runs, decided from the configuration, the op, its size
// and where its peers are, so that every node of an op picks the same schedule.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <chorus/config.hpp>

#include "strategies/schedule.hpp"

namespace chorus {

// The runtime decides: auto, or nccl (NCCL where every peer is its own GPU, auto's choice for
// everything else).
inline bool auto_or_nccl(const StrategyChoice& c) { return c.is_auto || c.fixed.algorithm == Algorithm::nccl; }

struct AutoRule {
  std::size_t threshold_bytes;  // below: latency bound; at or above: bandwidth bound
  int tree_arity;
  // Peers share memory (one process): every peer reads every other's buffer directly, so the
  // fewest rounds win. Small ops go centralized (one hand-off in, one out); large ones go direct
  // (each peer reduces 1/n in one pass over all inputs, then copies the other parts), which moves
  // about 3x the buffer per peer where the ring moves 5x, in 2 rounds instead of 2(n-1).
  // Over a network: a tree below the threshold, the ring (bandwidth-optimal per link) above.
  bool shared_memory = false;
};

// Resolves a choice for one call (see AutoRule for the reasoning; the README has the measurements).
Strategy select_strategy(const StrategyChoice& c, const AutoRule& rule, OpKind op,
                         std::size_t bytes, int n);

// The strategy the local server runs for an op of `count` elements per peer (in the sense of
// strategies/schedule.hpp) among n peers of one process: the fixed choice, or what auto picks.
Strategy local_strategy(const Config& config, OpKind op, DType dtype, std::size_t count, int n);

// The strategy over all peers of all nodes (multi-node mode) for an op among n peers.
// `separate`: every peer of the op is on a node of its own, so auto may pick the one-shot
// all-reduce for small buffers (strategies/oneshot.cpp). `crowded`: those node processes share
// one machine and outnumber its hardware threads, so auto counts messages rather than hops.
Strategy global_strategy(const Config& config, OpKind op, DType dtype, std::size_t count, int n,
                         bool separate = false, bool crowded = false);
inline constexpr int kStarPeers = 8;  // crowded small all-reduces go centralized up to this

} // namespace chorus
