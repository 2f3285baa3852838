#include <chorus/strategy.hpp>

#include <charconv>

namespace chorus {

std::string to_string(const Strategy& s) {
  switch (s.algorithm) {
    case Algorithm::centralized: return "centralized";
    case Algorithm::tree: return "tree:" + std::to_string(s.arity);
    case Algorithm::ring: return "ring";
    case Algorithm::dbtree: return "dbtree";
    case Algorithm::direct: return "direct";
    case Algorithm::nccl: return "nccl";
    case Algorithm::oneshot: return "oneshot";
  }
  return "unknown";
}

std::optional<StrategyChoice> parse_strategy(std::string_view t) {
  StrategyChoice c;
  if (t == "auto") return c;
  c.is_auto = false;
  if (t == "centralized") c.fixed = {Algorithm::centralized, 2};
  else if (t == "ring") c.fixed = {Algorithm::ring, 2};
  else if (t == "dbtree") c.fixed = {Algorithm::dbtree, 2};
  else if (t == "direct") c.fixed = {Algorithm::direct, 2};
  else if (t == "nccl") c.fixed = {Algorithm::nccl, 2};
  else if (t == "tree") c.fixed = {Algorithm::tree, 2};
  else if (t.substr(0, 5) == "tree:") {
    int k = 0;
    auto digits = t.substr(5);
    auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), k);
    if (ec != std::errc() || p != digits.data() + digits.size() || k < 2) return std::nullopt;
    c.fixed = {Algorithm::tree, k};
  } else {
    return std::nullopt;
  }
  return c;
}

std::string to_string(const StrategyChoice& c) { return c.is_auto ? "auto" : to_string(c.fixed); }

} // namespace chorus
