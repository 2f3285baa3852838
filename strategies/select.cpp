#include "strategies/select.hpp"

#include <charconv>

namespace chorus {

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

Strategy select_strategy(const StrategyChoice& c, const AutoRule& rule, OpKind op,
                         std::size_t bytes, int n) {
  if (!auto_or_nccl(c)) return c.fixed;
  const bool small = bytes < rule.threshold_bytes || n < 2 || op == OpKind::barrier;
  if (rule.shared_memory) return {small ? Algorithm::centralized : Algorithm::direct, 2};
  if (small) return {Algorithm::tree, rule.tree_arity};
  return {Algorithm::ring, 2};
}

} // namespace chorus
