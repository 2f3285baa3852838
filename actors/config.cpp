#include "actors/config.hpp"

namespace chorus {

Config& Config::with_local_strategy(StrategyChoice s) {
  local.fill(s);
  return *this;
}

Config& Config::with_global_strategy(StrategyChoice s) {
  global.fill(s);
  return *this;
}

namespace {
Status bad(std::string what) { return {Errc::invalid_config, std::move(what)}; }

std::string check_choices(const std::array<StrategyChoice, num_collective_kinds>& a,
                          const char* level) {
  for (std::size_t k = 0; k < a.size(); ++k)
    if (!a[k].is_auto && a[k].fixed.algorithm == Algorithm::tree && a[k].fixed.arity < 2)
      return std::string(level) + " strategy for " +
             std::string(to_string(static_cast<OpKind>(k))) + ": tree arity " +
             std::to_string(a[k].fixed.arity) + " is below 2";
  return {};
}
} // namespace

namespace {
// Ops whose per-peer count is one block of an n-block buffer are sized by the whole buffer.
std::size_t op_bytes(OpKind op, DType dtype, std::size_t count, int n) {
  std::size_t bytes = count * dtype_size(dtype);
  if (op == OpKind::all_gather || op == OpKind::reduce_scatter) bytes *= static_cast<std::size_t>(n);
  return bytes;
}
} // namespace

Strategy Config::local_strategy(OpKind op, DType dtype, std::size_t count, int n) const {
  AutoRule rule{auto_threshold_bytes, auto_tree_arity, /*shared_memory=*/true};
  return select_strategy(local[static_cast<std::size_t>(op)], rule, op, op_bytes(op, dtype, count, n), n);
}

Strategy Config::global_strategy(OpKind op, DType dtype, std::size_t count, int n, bool separate,
                                 bool crowded) const {
  AutoRule rule{auto_threshold_bytes, auto_tree_arity, /*shared_memory=*/false};
  const StrategyChoice& c = global[static_cast<std::size_t>(op)];
  const std::size_t bytes = op_bytes(op, dtype, count, n);
  // Every peer in its own process and a small buffer: one exchange in which every peer folds
  // every buffer (strategies/oneshot.cpp), instead of a tree's 2 log n hops. Each peer takes in
  // n - 1 buffers, so the whole inflow, not one buffer, must stay small.
  // Node processes crowding one machine's cores pay for every message in CPU time they all
  // wait for: there the n(n-1) messages of the one-shot lose to the 2(n-1) of a star (one hop in,
  // one out; measured, 4 nodes on 2 cores, 1 KiB: about 105 us against 170-240 us).
  const std::size_t inflow = bytes * static_cast<std::size_t>(n > 1 ? n - 1 : 1);
  const bool small = op == OpKind::all_reduce && n >= 2 && inflow < auto_threshold_bytes;
  if (auto_or_nccl(c) && separate && small) {
    if (!crowded || n == 2) return {Algorithm::oneshot, 2};
    if (n <= kStarPeers) return {Algorithm::centralized, 2};
  }
  return select_strategy(c, rule, op, bytes, n);
}

Status Config::validate() const {
  if (num_devices == 0) return bad("num_devices is 0; it must be at least 1");
  if (num_devices > 4096) return bad("num_devices " + std::to_string(num_devices) + " exceeds 4096");
  if (auto_tree_arity < 2) return bad("auto_tree_arity " + std::to_string(auto_tree_arity) + " is below 2");
  if (timeout.count() <= 0) return bad("timeout must be positive, got " + std::to_string(timeout.count()) + " ms");
  if (auto e = check_choices(local, "local"); !e.empty()) return bad(e);
  if (auto e = check_choices(global, "global"); !e.empty()) return bad(e);
  // Multi-node fields come as a set: either all are given or none is.
  bool any_global = num_nodes != 0 || !orchestrator_address.empty() || !node_address.empty();
  if (any_global && (num_nodes == 0 || orchestrator_address.empty() || node_address.empty()))
    return bad("multi-node configuration needs num_nodes, orchestrator_address and node_address together");
  if (has_tls() && (tls_certificate.empty() || tls_key.empty() || tls_ca.empty()))
    return bad("TLS needs tls_certificate, tls_key and tls_ca together");
  return Status::ok();
}

std::string Config::first_difference(const Config& o) const {
  auto num = [](const char* f, auto a, auto b) {
    return std::string(f) + " (" + std::to_string(a) + " vs " + std::to_string(b) + ")";
  };
  if (num_devices != o.num_devices) return num("num_devices", num_devices, o.num_devices);
  for (std::size_t k = 0; k < local.size(); ++k)
    if (!(local[k] == o.local[k]))
      return "local strategy for " + std::string(to_string(static_cast<OpKind>(k))) + " (" +
             to_string(local[k]) + " vs " + to_string(o.local[k]) + ")";
  if (auto_threshold_bytes != o.auto_threshold_bytes)
    return num("auto_threshold_bytes", auto_threshold_bytes, o.auto_threshold_bytes);
  if (auto_tree_arity != o.auto_tree_arity) return num("auto_tree_arity", auto_tree_arity, o.auto_tree_arity);
  if (timeout != o.timeout) return num("timeout_ms", timeout.count(), o.timeout.count());
  if (num_nodes != o.num_nodes) return num("num_nodes", num_nodes, o.num_nodes);
  if (orchestrator_address != o.orchestrator_address)
    return "orchestrator_address (" + orchestrator_address + " vs " + o.orchestrator_address + ")";
  for (std::size_t k = 0; k < global.size(); ++k)
    if (!(global[k] == o.global[k]))
      return "global strategy for " + std::string(to_string(static_cast<OpKind>(k))) + " (" +
             to_string(global[k]) + " vs " + to_string(o.global[k]) + ")";
  return {};
}

} // namespace chorus
