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

// "auto", "centralized", "tree:K" (K >= 2; "tree" means tree:2), "ring", "dbtree".
std::optional<StrategyChoice> parse_strategy(std::string_view text);
std::string to_string(const StrategyChoice& c);

struct AutoRule {
  std::size_t threshold_bytes;  // below: tree(arity) — latency bound; at or above: ring — bandwidth bound
  int tree_arity;
};

// Resolves a choice for one call. Small messages or few peers favour few sequential steps (tree,
// or centralized for 2 peers where it is the same thing); large ones favour the ring, whose per-peer
// traffic does not grow with the group.
Strategy select_strategy(const StrategyChoice& c, const AutoRule& rule, OpKind op,
                         std::size_t bytes, int n);

} // namespace chorus
