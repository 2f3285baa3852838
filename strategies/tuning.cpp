#include "strategies/tuning.hpp"

#include "core/settings.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <utility>

namespace chorus {

std::string to_string(const RunStrategy& s) {
  switch (s.path) {
    case RunStrategy::Path::none: return "";
    case RunStrategy::Path::schedule:
      return (s.by_host ? "hosts+" : s.hierarchical ? "hier+" : "") + to_string(s.strategy);
    case RunStrategy::Path::p2p: return "p2p";
    case RunStrategy::Path::nccl: return "nccl";
    case RunStrategy::Path::device: return "device";
    case RunStrategy::Path::arena: return "arena";
    case RunStrategy::Path::cuda_ipc: return "cuda-ipc";
  }
  return "";
}

namespace {

// Ops whose per-peer count is one block of an n-block buffer are sized by the whole buffer.
std::size_t op_bytes(OpKind op, DType dtype, std::size_t count, int n) {
  std::size_t bytes = count * dtype_size(dtype);
  if (op == OpKind::all_gather || op == OpKind::reduce_scatter) bytes *= static_cast<std::size_t>(n);
  return bytes;
}

// The size rule shared by both levels: latency bound below the threshold, bandwidth bound at or
// above it (the README has the measurements).
Strategy by_size(const StrategyChoice& c, const Config& config, bool shared_memory, OpKind op, std::size_t bytes,
                 int n, std::string* why) {
  if (!auto_or_nccl(c)) {
    if (why) *why += "the configured strategy";
    return c.fixed;
  }
  const bool small = bytes < config.auto_threshold_bytes || n < 2 || op == OpKind::barrier;
  if (why)
    *why += op == OpKind::barrier ? "a barrier" :
            std::to_string(bytes) + " B " + (small ? "<" : ">=") + " the threshold (" +
                std::to_string(config.auto_threshold_bytes) + " B)";
  if (shared_memory) return {small ? Algorithm::centralized : Algorithm::direct, 2};
  if (small) return {Algorithm::tree, config.auto_tree_arity};
  return {Algorithm::ring, 2};
}

// Over a network among n peers. `separate`: every one of them is on a node of its own.
Strategy over_network(const Config& config, OpKind op, DType dtype, std::size_t count, int n, bool separate,
                      bool crowded, std::string* why) {
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
  const bool star = crowded && n != 2;
  if (auto_or_nccl(c) && separate && small && (!star || n <= kStarPeers)) {
    if (why) {
      *why += "an inflow of " + std::to_string(inflow) + " B < the threshold, every peer a node";
      if (star) *why += ", crowding the cores, up to " + std::to_string(kStarPeers) + " peers";
    }
    return {star ? Algorithm::centralized : Algorithm::oneshot, 2};
  }
  return by_size(c, config, /*shared_memory=*/false, op, bytes, n, why);
}

} // namespace

std::vector<Program> schedule_of(const RunStrategy& s, const ScheduleParams& p, const Topology& t) {
  if (!s.hierarchical) return make_schedule(p);
  std::vector<int> group(t.rank_node.begin(), t.rank_node.end());
  if (s.by_host)
    for (auto& g : group)
      if (static_cast<std::size_t>(g) < t.node_domain.size()) g = static_cast<int>(t.node_domain[static_cast<std::size_t>(g)]);
  return hierarchical_schedule(p, group);
}

bool crowded(const Topology& t) {
  if (t.shared_memory) return false;
  // Node processes of this op that share a machine and outnumber its hardware threads take turns
  // on its cores. Judged from the topology alone (hosts and the threads each node registered
  // with), so every node of the op reaches the same verdict.
  std::vector<bool> seen;
  std::map<std::string, std::pair<unsigned, unsigned>> on_host;  // host: nodes of the op, fewest threads
  for (uint32_t node : t.rank_node) {
    if (node >= seen.size()) seen.resize(node + 1, false);
    if (seen[node]) continue;
    seen[node] = true;
    const std::string host = node < t.node_host.size() ? t.node_host[node] : std::string();
    const unsigned threads = node < t.node_threads.size() ? t.node_threads[node] : 1u;
    auto [it, fresh] = on_host.try_emplace(host, 0u, ~0u);
    it->second.first += 1;
    it->second.second = std::min(it->second.second, std::max(1u, threads));
    if (it->second.first > it->second.second) return true;
  }
  return false;
}

RunStrategy tune(const Config& config, OpKind op, DType dtype, std::size_t count, const Topology& t, std::string* why) {
  const int n = t.peers;
  if (t.shared_memory) {
    const StrategyChoice& c = config.local[static_cast<std::size_t>(op)];
    if (why) *why += "one process: ";
    return RunStrategy::flat(by_size(c, config, /*shared_memory=*/true, op, op_bytes(op, dtype, count, n), n, why));
  }
  std::vector<bool> seen;
  int nodes = 0;
  for (uint32_t node : t.rank_node) {
    if (node >= seen.size()) seen.resize(node + 1, false);
    if (!seen[node]) {
      seen[node] = true;
      ++nodes;
    }
  }
  // Memory domains (hosts whose processes share memory) among the op's nodes.
  std::vector<uint32_t> domains;
  for (uint32_t node : t.rank_node) {
    const uint32_t d = node < t.node_domain.size() ? t.node_domain[node] : ~node;
    if (std::find(domains.begin(), domains.end(), d) == domains.end()) domains.push_back(d);
  }
  const int hosts = static_cast<int>(domains.size());
  const bool crowd = crowded(t);
  // Several peers on some node: an auto all-reduce, all-gather or reduce-scatter goes through one
  // leader per node, so that only the leaders' exchange crosses the network
  // (strategies/hierarchical.cpp). Reduce and broadcast gain little there (a flat pipelined tree
  // crosses a node boundary about once anyway) and lose the overlap of local and network steps:
  // measured slower, left flat. A strategy named in the config runs flat, as named.
  const bool hier_kind = op == OpKind::all_reduce || op == OpKind::all_gather || op == OpKind::reduce_scatter;
  // Several hosts, one of them with several node processes sharing its memory: one leader per
  // host, so that only the leaders' op crosses the network.
  if (hier_kind && auto_or_nccl(config.global[static_cast<std::size_t>(op)]) && hosts >= 2 && hosts < nodes) {
    if (why) *why += std::to_string(hosts) + " hosts of " + std::to_string(nodes) + " nodes: one leader per host; among them, ";
    return RunStrategy::among_hosts(over_network(config, op, dtype, count, hosts, /*separate=*/true, crowd, why));
  }
  if (hier_kind && auto_or_nccl(config.global[static_cast<std::size_t>(op)]) && nodes >= 2 && nodes < n) {
    if (why) *why += std::to_string(n) + " peers on " + std::to_string(nodes) + " nodes: one leader per node; among them, ";
    return RunStrategy::among_leaders(over_network(config, op, dtype, count, nodes, /*separate=*/true, crowd, why));
  }
  if (why) *why += std::to_string(nodes) + (nodes == 1 ? " node: " : " nodes: ");
  return RunStrategy::flat(over_network(config, op, dtype, count, n, /*separate=*/nodes == n, crowd, why));
}

std::size_t arena_slot_bytes(uint32_t peers) {
  static const uint64_t kib = tuned_number(SettingId::arena_kib);
  if (kib == 0 || peers == 0) return 0;
  const std::size_t wanted = static_cast<std::size_t>(kib) << 10;
  const std::size_t share = (std::size_t{4} << 20) / (2 * std::size_t{peers});
  return std::max<std::size_t>(std::min(wanted, share), std::min<std::size_t>(wanted, 4096));
}

bool arena_allowed(const Config& config, OpKind kind, bool across_nodes) {
  const auto k = static_cast<std::size_t>(kind);
  const auto& choices = across_nodes ? config.global : config.local;
  return k < choices.size() && choices[k].is_auto;
}

std::chrono::milliseconds arena_wait(const Config& config) {
  static const auto ms = std::chrono::milliseconds(tuned_number(SettingId::arena_wait_ms));
  return std::min(ms, config.timeout / 4);
}

bool nccl_across_nodes(const StrategyChoice& choice, OpKind kind, bool nccl_serves, const Topology& t) {
  if (!auto_or_nccl(choice) || !nccl_serves) return false;
  if (kind == OpKind::barrier || kind == OpKind::send || kind == OpKind::recv) return false;
  if (!choice.is_auto) return true;
  // auto: a node without a GPU can bring host tensors only, which NCCL cannot take; every node
  // then stages, so that the op still meets them.
  if (t.rank_node.empty()) return false;
  for (uint32_t node : t.rank_node)
    if (node >= t.node_gpus.size() || t.node_gpus[node] == 0) return false;
  return true;
}

} // namespace chorus
