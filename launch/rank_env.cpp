#include "launch/rank_env.hpp"

#include <set>
#include <string_view>

namespace chorus::launch {

EnvVars rank_env(const RankPlace& place, const JobEnv& job) {
  EnvVars env{
      {"CHORUS_RANK", std::to_string(place.rank)},
      {"CHORUS_WORLD_SIZE", std::to_string(job.world_size)},
      {"CHORUS_LOCAL_RANK", std::to_string(place.local_rank)},
      {"CHORUS_LOCAL_WORLD_SIZE", std::to_string(place.local_world_size)},
      {"CHORUS_ORCHESTRATOR", job.orchestrator},
      {"CHORUS_NODE_ADDRESS", place.local ? job.local_node_address : place.host},
  };
  env.insert(env.end(), job.extra.begin(), job.extra.end());
  if (job.peers) env.emplace_back("CHORUS_PEERS", std::to_string(*job.peers));
  if (job.join_timeout_ms) env.emplace_back("CHORUS_JOIN_TIMEOUT_MS", std::to_string(*job.join_timeout_ms));
  if (job.master_port) {
    env.insert(env.end(), {{"RANK", std::to_string(place.rank)},
                           {"WORLD_SIZE", std::to_string(job.world_size)},
                           {"LOCAL_RANK", std::to_string(place.local_rank)},
                           {"LOCAL_WORLD_SIZE", std::to_string(place.local_world_size)},
                           {"MASTER_ADDR", job.master_addr},
                           {"MASTER_PORT", std::to_string(job.master_port)}});
  }
  return env;
}

std::vector<std::string> merged_environment(const char* const* base, const EnvVars& vars) {
  std::set<std::string_view> replaced;
  for (const auto& [name, value] : vars) replaced.insert(name);
  std::vector<std::string> out;
  for (const char* const* e = base; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (!replaced.count(entry.substr(0, entry.find('=')))) out.emplace_back(entry);
  }
  for (const auto& [name, value] : vars) out.push_back(name + "=" + value);
  return out;
}

} // namespace chorus::launch
