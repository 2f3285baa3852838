// Strategy names: how an op moves data (the algorithms of strategies/), and the choice a Config
// makes per op kind: "auto" (the tuning module decides) or one fixed algorithm.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace chorus {

// direct: every peer talks to every other directly in one or two rounds ("one-shot", for shared
// memory); all recv_reduce steps of a round into one region are consecutive with the same
// (offset, count), so an executor may fuse them (see strategies/direct.cpp for the combination
// order).
// nccl: device tensors on distinct GPUs go through an NCCL communicator (cuda/); it has no host
// schedule, and everything else (host tensors, logical peers sharing a GPU) resolves as auto does.
// oneshot: all_reduce in one exchange, every peer folding every buffer in rank order
// (strategies/oneshot.cpp); chosen by auto across nodes for small buffers, never named in a
// configuration.
enum class Algorithm : uint8_t { centralized, tree, ring, dbtree, direct, nccl, oneshot };

// A resolved strategy (auto has already been decided by the tuning module).
struct Strategy {
  Algorithm algorithm = Algorithm::ring;
  int arity = 2;  // tree only, >= 2
  bool operator==(const Strategy&) const = default;
};

std::string to_string(const Strategy& s);  // "centralized", "tree:3", "ring", "dbtree", "direct"

struct StrategyChoice {
  bool is_auto = true;
  Strategy fixed{};  // used when !is_auto
  bool operator==(const StrategyChoice&) const = default;
};

// "auto", "centralized", "tree:K" (K >= 2; "tree" means tree:2), "ring", "dbtree", "direct",
// "nccl" (device tensors on distinct GPUs; resolved like auto for everything else).
std::optional<StrategyChoice> parse_strategy(std::string_view text);
std::string to_string(const StrategyChoice& c);

} // namespace chorus
