#include <chorus/config.hpp>

#include <string>

#include "core/log.hpp"
#include "core/trace_name.hpp"

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

Status Config::validate() const {
  if (num_devices == 0) return bad("num_devices is 0; it must be at least 1");
  if (num_devices > kMaxDevices)
    return bad("num_devices " + std::to_string(num_devices) + " exceeds " + std::to_string(kMaxDevices));
  if (auto_tree_arity < 2) return bad("auto_tree_arity " + std::to_string(auto_tree_arity) + " is below 2");
  if (timeout.count() <= 0) return bad("timeout must be positive, got " + std::to_string(timeout.count()) + " ms");
  if (auto e = check_choices(local, "local"); !e.empty()) return bad(e);
  if (auto e = check_choices(global, "global"); !e.empty()) return bad(e);
  // Multi-node fields come as a set: either all are given or none is.
  // (A rendezvous file stands for the orchestrator's address: rank 0 writes it once it listens.)
  const bool any_global =
      num_nodes != 0 || !orchestrator_address.empty() || !node_address.empty() || !rendezvous_file.empty();
  if (any_global &&
      (num_nodes == 0 || (orchestrator_address.empty() == rendezvous_file.empty()) || node_address.empty()))
    return bad(!orchestrator_address.empty() && !rendezvous_file.empty()
                   ? "orchestrator_address and rendezvous_file are two ways to find the orchestrator: give one"
                   : "multi-node configuration needs num_nodes, orchestrator_address and node_address together");
  if (rank < -1 || (rank >= 0 && static_cast<uint32_t>(rank) >= num_nodes))
    return bad("rank " + std::to_string(rank) + " is not a node of " + std::to_string(num_nodes) +
               (num_nodes == 0 ? " (a rank is for multi-node mode)" : " (0 to num_nodes-1, or -1: any)"));
  if (join_timeout.count() < 0) return bad("join_timeout is negative (" + std::to_string(join_timeout.count()) + " ms)");
  if (host_orchestrator && num_nodes == 0) return bad("host_orchestrator is for multi-node mode (num_nodes is 0)");
  if (has_tls() && (tls_certificate.empty() || tls_key.empty() || tls_ca.empty()))
    return bad("TLS needs tls_certificate, tls_key and tls_ca together");
  LogLevel level;
  if (!parse_log_level(debug, level))
    return bad("debug '" + debug + "' is not a log level (error, warn, info, trace, or empty)");
  uint32_t mask;
  if (!parse_log_subsys(debug_subsys, mask))
    return bad("debug_subsys '" + debug_subsys + "' names an unknown subsystem (init, op, net, shm, orch, cuda)");
  if (flight_recorder > kMaxFlightRecorder)
    return bad("flight_recorder " + std::to_string(flight_recorder) + " is over " + std::to_string(kMaxFlightRecorder) +
               " ops per peer");
  if (auto why = trace_pattern_problem(trace_file); !why.empty()) return bad("trace_file " + why);
  return Status::ok();
}

std::string_view to_string(HostTransport t) {
  switch (t) {
    case HostTransport::automatic: return "automatic";
    case HostTransport::network: return "network";
  }
  return "unknown";
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
  if (rank != o.rank) return num("rank", rank, o.rank);
  if (join_timeout != o.join_timeout) return num("join_timeout_ms", join_timeout.count(), o.join_timeout.count());
  if (host_orchestrator != o.host_orchestrator) return num("host_orchestrator", host_orchestrator, o.host_orchestrator);
  if (rendezvous_file != o.rendezvous_file)
    return "rendezvous_file (" + rendezvous_file + " vs " + o.rendezvous_file + ")";
  if (elastic != o.elastic) return num("elastic", elastic, o.elastic);
  if (seal_data != o.seal_data) return num("seal_data", seal_data, o.seal_data);
  if (host_transport != o.host_transport)
    return "host_transport (" + std::string(to_string(host_transport)) + " vs " + std::string(to_string(o.host_transport)) + ")";
  return {};
}

} // namespace chorus
