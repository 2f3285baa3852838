// Config::from_env: what a launcher passes a process, read into a Config (docs/launching.md).
#include <cctype>
#include <cstdio>

#include <chorus/config.hpp>

#include "core/env.hpp"
#include "core/settings.hpp"
#include "core/host_names.hpp"
#include "core/secret.hpp"

namespace chorus {

namespace {

// The launchers whose numbering a process takes, in the order they win when several are set (a
// launcher started inside another's job sees both: torchrun under srun, mpirun in an sbatch).
// Slurm's pair counts inside a job step only (srun's): an sbatch script's own shell has
// SLURM_PROCID and SLURM_NTASKS too, and a program it runs by itself is one process. Slurm comes
// before MPICH's PMI pair, which srun --mpi=pmi2 sets as well (with no host count or job id).
struct Launcher {
  const char* name;
  const char* rank;
  const char* size;
  const char* local_size;  // nullptr: the launcher does not say
  const char* nodes;       // hosts of the job (nullptr: it does not say)
  const char* inside;      // counts only while this is set too (nullptr: always)
};
constexpr Launcher kLaunchers[] = {
    {"chorus-run", "CHORUS_RANK", "CHORUS_WORLD_SIZE", "CHORUS_LOCAL_WORLD_SIZE", nullptr, nullptr},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", nullptr, nullptr},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", nullptr, nullptr},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", nullptr, "SLURM_STEP_NUM_NODES", "SLURM_STEP_ID"},
    {"MPICH", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS", nullptr, nullptr},
};
constexpr uint64_t kMaxWorld = 65536;  // the orchestrator's bound on nodes

struct Numbering {
  const Launcher* by = nullptr;
  uint32_t rank = 0, world = 1;
  bool one_host = false;  // the launcher says every rank is on this host
};

Result<Numbering> numbering() {
  Numbering n;
  for (const Launcher& l : kLaunchers) {
    const bool has_rank = env_text(l.rank).has_value(), has_size = env_text(l.size).has_value();
    if (!has_rank && !has_size) continue;
    if (l.inside && !env_text(l.inside)) continue;
    if (has_rank != has_size)
      return Status(Errc::invalid_config, std::string(has_rank ? l.rank : l.size) + " is set but " +
                                              (has_rank ? l.size : l.rank) + " is not (" + l.name + "'s pair)");
    auto size = env_number(l.size, 1, kMaxWorld);
    if (!size) return size.status();
    auto rank = env_number(l.rank, 0, **size - 1);
    if (!rank) return rank.status();
    n.by = &l;
    n.rank = static_cast<uint32_t>(**rank);
    n.world = static_cast<uint32_t>(**size);
    if (l.local_size) {
      auto local = env_number(l.local_size, 1, kMaxWorld);
      if (!local) return local.status();
      n.one_host = *local && **local == n.world;
    }
    if (l.nodes) {
      auto nodes = env_number(l.nodes, 1, kMaxWorld);
      if (!nodes) return nodes.status();
      n.one_host = *nodes && **nodes == 1;
    }
    return n;
  }
  return n;  // no launcher: one process
}

// FNV-1a, to fold a launcher's long id into a file name.
std::string fold(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : text) h = (h ^ ch) * 1099511628211ull;
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

// What tells this job from every other on the host (a rendezvous file's name), or "". Open MPI's
// job id is a 16-bit hash of mpirun's and a count, so its daemon's address (with its port) goes
// in too; a requeued Slurm job keeps its id, so its restart count goes in.
std::string job_key(const Launcher& by) {
  const std::string name = by.name;
  if (name == "Open MPI") {
    if (auto id = env_text("OMPI_MCA_ess_base_jobid"))
      return "ompi-" + *id + "-" + fold(env_text("OMPI_MCA_orte_hnp_uri").value_or(""));
  } else if (name == "Slurm") {
    auto job = env_text("SLURM_JOB_ID"), step = env_text("SLURM_STEP_ID");
    if (job) return "slurm-" + *job + "." + step.value_or("0") + "." + env_text("SLURM_RESTART_COUNT").value_or("0");
  }
  return "";
}

// A file name part: nothing a launcher's id could use to climb out of the directory.
bool plain(const std::string& s) {
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_')) return false;
  return !s.empty() && s.find("..") == std::string::npos;
}

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

  auto n = numbering();
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
  } else if (n->one_host && plain(job_key(*n->by))) {
    c.rendezvous_file = private_file_dir() + "/" + job_key(*n->by) + ".rendezvous";
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
