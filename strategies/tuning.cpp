#include "strategies/tuning.hpp"


namespace chorus {

Strategy select_strategy(const StrategyChoice& c, const AutoRule& rule, OpKind op,
                         std::size_t bytes, int n) {
  if (!auto_or_nccl(c)) return c.fixed;
  const bool small = bytes < rule.threshold_bytes || n < 2 || op == OpKind::barrier;
  if (rule.shared_memory) return {small ? Algorithm::centralized : Algorithm::direct, 2};
  if (small) return {Algorithm::tree, rule.tree_arity};
  return {Algorithm::ring, 2};
}

namespace {
// Ops whose per-peer count is one block of an n-block buffer are sized by the whole buffer.
std::size_t op_bytes(OpKind op, DType dtype, std::size_t count, int n) {
  std::size_t bytes = count * dtype_size(dtype);
  if (op == OpKind::all_gather || op == OpKind::reduce_scatter) bytes *= static_cast<std::size_t>(n);
  return bytes;
}
} // namespace

Strategy local_strategy(const Config& config, OpKind op, DType dtype, std::size_t count, int n) {
  AutoRule rule{config.auto_threshold_bytes, config.auto_tree_arity, /*shared_memory=*/true};
  return select_strategy(config.local[static_cast<std::size_t>(op)], rule, op, op_bytes(op, dtype, count, n), n);
}

Strategy global_strategy(const Config& config, OpKind op, DType dtype, std::size_t count, int n, bool separate,
                         bool crowded) {
  AutoRule rule{config.auto_threshold_bytes, config.auto_tree_arity, /*shared_memory=*/false};
  const StrategyChoice& c = config.global[static_cast<std::size_t>(op)];
  const std::size_t bytes = op_bytes(op, dtype, count, n);
  // Every peer in its own process and a small buffer: one exchange in which every peer folds
  // every buffer (strategies/oneshot.cpp), instead of a tree's 2 log n hops. Each peer takes in
  // n - 1 buffers, so the whole inflow, not one buffer, must stay small.
  // Node processes crowding one machine's cores pay for every message in CPU time they all
  // wait for: there the n(n-1) messages of the one-shot lose to the 2(n-1) of a star (one hop in,
  // one out; measured, 4 nodes on 2 cores, 1 KiB: about 105 us against 170-240 us).
  const std::size_t inflow = bytes * static_cast<std::size_t>(n > 1 ? n - 1 : 1);
  const bool small = op == OpKind::all_reduce && n >= 2 && inflow < config.auto_threshold_bytes;
  if (auto_or_nccl(c) && separate && small) {
    if (!crowded || n == 2) return {Algorithm::oneshot, 2};
    if (n <= kStarPeers) return {Algorithm::centralized, 2};
  }
  return select_strategy(c, rule, op, bytes, n);
}

} // namespace chorus
