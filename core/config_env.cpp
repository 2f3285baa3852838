// Config::from_env: what a launcher passes a process, read into a Config (docs/launching.md).
#include <chorus/config.hpp>

#include "core/env.hpp"
#include "core/launch_env.hpp"
#include "core/settings.hpp"
#include "core/host_names.hpp"
#include "core/secret.hpp"

namespace chorus {

namespace {

// The orchestrator's secret: CHORUS_SECRET_FILE's first line, else CHORUS_SECRET.
Result<std::string> job_secret_from_env() {
  if (auto file = setting_text(SettingId::secret_file)) {
    auto secret = read_secret_file(*file);
    if (!secret) return Status(Errc::invalid_config, "CHORUS_SECRET_FILE: " + secret.status().message());
    return *secret;
  }
  return secret_from_env();
}

} // namespace

static_assert(Config::kMaxDevices == 4096, "CHORUS_PEERS's range (core/settings_table.cpp)");

Result<Config> Config::from_env() {
  Config c;
  auto peers = setting_number(SettingId::peers);
  if (!peers) return peers.status();
  if (*peers) c.num_devices = static_cast<uint32_t>(**peers);
  auto timeout = setting_number(SettingId::timeout_ms);
  if (!timeout) return timeout.status();
  if (*timeout) c.timeout = std::chrono::milliseconds(**timeout);
  auto join = setting_number(SettingId::join_timeout_ms);
  if (!join) return join.status();
  if (*join) c.join_timeout = std::chrono::milliseconds(**join);

  auto elastic = setting_number(SettingId::elastic);
  if (!elastic) return elastic.status();
  c.elastic = elastic->value_or(0) == 1;
  auto seal = setting_number(SettingId::seal_data);
  if (!seal) return seal.status();
  if (*seal) c.seal_data = **seal == 1;
  auto joining = setting_number(SettingId::join);
  if (!joining) return joining.status();

  auto n = launch_numbering();
  if (!n) return n.status();
  if (joining->value_or(0) == 1) {
    // A newcomer to a running elastic job (chorus-run --join): the orchestrator is named, and it
    // numbers the newcomers after the members when they grow (docs/elastic.md).
    auto orch = setting_text(SettingId::orchestrator);
    if (!orch) return Status(Errc::invalid_config, "CHORUS_JOIN=1 needs CHORUS_ORCHESTRATOR (the running job's orchestrator)");
    c.elastic = true;
    c.newcomer = true;
    c.num_nodes = n->world;
    c.rank = -1;
    c.orchestrator_address = *orch;
    auto secret = job_secret_from_env();
    if (!secret) return secret.status();
    c.secret = *secret;
    c.node_address = setting_text(SettingId::node_address).value_or("127.0.0.1");
    if (auto s = c.validate(); !s) return Status(s.code(), "a newcomer (CHORUS_JOIN=1): " + s.message());
    return c;
  }
  if (n->world == 1) return c;  // one process: no orchestrator, no secret needed

  const std::string who = "rank " + std::to_string(n->rank) + " of " + std::to_string(n->world) + " (" + n->by->name + ")";
  c.num_nodes = n->world;
  c.rank = static_cast<int32_t>(n->rank);
  auto secret = job_secret_from_env();
  if (!secret) return secret.status();
  c.secret = *secret;

  // Where the orchestrator is: named (a daemon, or chorus-run's), else rank 0 hosts it.
  if (auto orch = setting_text(SettingId::orchestrator)) {
    c.orchestrator_address = *orch;
  } else if (auto addr = env_text("MASTER_ADDR"), port = env_text("MASTER_PORT"); addr || port) {
    if (!addr || !port) return Status(Errc::invalid_config, std::string(addr ? "MASTER_PORT" : "MASTER_ADDR") +
                                                                 " is not set, but " + (addr ? "MASTER_ADDR" : "MASTER_PORT") + " is");
    auto p = env_number("MASTER_PORT", 1, 65535);
    if (!p) return p.status();
    // MASTER_PORT is torch.distributed's own store's (torchrun's agent's, or rank 0's
    // init_process_group's): the orchestrator listens at the next port.
    if (**p == 65535) return Status(Errc::invalid_config, "MASTER_PORT=65535 leaves no next port for the orchestrator");
    const uint64_t listen = **p + 1;
    c.orchestrator_address = host_port(*addr, listen);
    c.host_orchestrator = n->rank == 0;
  } else if (const std::string key = n->one_host ? launch_job_key(*n->by) : ""; !key.empty()) {
    c.rendezvous_file = private_file_dir() + "/" + key + ".rendezvous";
    c.host_orchestrator = n->rank == 0;
  } else {
    return Status(Errc::invalid_config,
                  who + ": no orchestrator address; set MASTER_ADDR and MASTER_PORT (rank 0's host and a port: rank 0 "
                        "hosts the orchestrator at MASTER_PORT+1) or CHORUS_ORCHESTRATOR=host:port (a running "
                        "orchestrator's: chorus-run's or a chorus-orchestrator daemon's)" +
                      (n->one_host ? std::string() : " (the ranks may be on several hosts)"));
  }

  if (auto node = setting_text(SettingId::node_address)) {
    c.node_address = *node;
  } else if (!c.rendezvous_file.empty()) {
    c.node_address = "127.0.0.1";
  } else {
    c.node_address = address_toward(host_of(c.orchestrator_address), n->one_host);
    if (c.node_address.empty())
      return Status(Errc::invalid_config, who + ": cannot tell this host's address toward the orchestrator at " +
                                              c.orchestrator_address + "; set CHORUS_NODE_ADDRESS");
  }
  if (auto s = c.validate(); !s) return Status(s.code(), who + ": " + s.message());
  return c;
}

} // namespace chorus
