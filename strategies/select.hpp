// Strategy choice as data: "auto" or a fixed algorithm, parsed from text and resolved per call.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "strategies/schedule.hpp"

namespace chorus {

struct StrategyChoice {
  bool is_auto = true;
  Strategy fixed{};  // used when !is_auto
  bool operator==(const StrategyChoice&) const = default;
};

// "auto", "centralized", "tree:K" (K >= 2; "tree" means tree:2), "ring", "dbtree", "direct",
// "nccl" (device tensors on distinct GPUs; resolved like auto for everything else).
std::optional<StrategyChoice> parse_strategy(std::string_view text);

// The runtime decides: auto, or nccl (NCCL where every peer is its own GPU, auto's choice for
// everything else).
inline bool auto_or_nccl(const StrategyChoice& c) { return c.is_auto || c.fixed.algorithm == Algorithm::nccl; }
std::string to_string(const StrategyChoice& c);

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

} // namespace chorus
