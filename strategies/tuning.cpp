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
  // Judged from the topology alone (hosts and the threads each node registered
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

} // namespace chorus
