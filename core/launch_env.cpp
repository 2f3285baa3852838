#include "core/launch_env.hpp"

#include <cctype>
#include <cstdio>

#include "core/env.hpp"

namespace chorus {

namespace {

// The launchers whose numbering a process takes, in the order they win when several are set (a
// launcher started inside another's job sees both: torchrun under srun, mpirun in an sbatch).
// Slurm's pair counts inside a job step only (srun's): an sbatch script's own shell has
// SLURM_PROCID and SLURM_NTASKS too, and a program it runs by itself is one process. Slurm comes
// before MPICH's PMI pair, which srun --mpi=pmi2 sets as well (with no host count or job id).
constexpr Launcher kLaunchers[] = {
    {"chorus-run", "CHORUS_RANK", "CHORUS_WORLD_SIZE", "CHORUS_LOCAL_WORLD_SIZE", nullptr, nullptr},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", nullptr, nullptr},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", nullptr, nullptr},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", nullptr, "SLURM_STEP_NUM_NODES", "SLURM_STEP_ID"},
    {"MPICH", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS", nullptr, nullptr},
};
constexpr uint64_t kMaxWorld = 65536;  // the orchestrator's bound on nodes

// FNV-1a, to fold a launcher's long id into a file name.
std::string fold(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : text) h = (h ^ ch) * 1099511628211ull;
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

// A file name part: nothing a launcher's id could use to climb out of the directory.
bool plain(const std::string& s) {
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_')) return false;
  return !s.empty() && s.find("..") == std::string::npos;
}

std::string job_key(const Launcher& by, bool with_srun_ports) {
  const std::string name = by.name;
  if (name == "Open MPI") {
    if (auto id = env_text("OMPI_MCA_ess_base_jobid"))
      return "ompi-" + *id + "-" + fold(env_text("OMPI_MCA_orte_hnp_uri").value_or(""));
  } else if (name == "Slurm") {
    auto job = env_text("SLURM_JOB_ID"), step = env_text("SLURM_STEP_ID");
    if (!job) return "";
    std::string key = "slurm-" + *job + "." + step.value_or("0") + "." + env_text("SLURM_RESTART_COUNT").value_or("0");
    if (with_srun_ports)
      key += "-" + fold(env_text("SLURM_SRUN_COMM_PORT").value_or("") + "/" + env_text("SLURM_STEP_LAUNCHER_PORT").value_or(""));
    return key;
  }
  return "";
}

} // namespace

Result<LaunchNumbering> launch_numbering() {
  LaunchNumbering n;
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

std::string launch_job_key(const Launcher& by, bool with_srun_ports) {
  const std::string key = job_key(by, with_srun_ports);
  return plain(key) ? key : "";
}

} // namespace chorus
