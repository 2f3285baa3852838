// What a launcher's environment says of this process: which launcher started it, its rank and
// the job's size, whether every rank is on this host, and what names this launch of the job.
// Config::from_env (C++ programs) and the Python package (chorus.torch_api.init_process_group)
// both read it here, so they take the same launcher where several are set (docs/launching.md).
#pragma once
#include <cstdint>
#include <string>

#include <chorus/result.hpp>

namespace chorus {

struct Launcher {
  const char* name;        // "chorus-run", "torchrun", "Open MPI", "Slurm", "MPICH"
  const char* rank;
  const char* size;
  const char* local_size;  // nullptr: the launcher does not say
  const char* nodes;       // hosts of the job (nullptr: it does not say)
  const char* inside;      // counts only while this is set too (nullptr: always)
};

struct LaunchNumbering {
  const Launcher* by = nullptr;  // nullptr: no launcher (one process)
  uint32_t rank = 0, world = 1;
  bool one_host = false;  // the launcher says every rank is on this host
};

// The first launcher whose pair (rank, size) is set; an error naming the variable where a pair is
// half set or a value is not a number in range.
Result<LaunchNumbering> launch_numbering();

// What tells this launch of the job from every other on the host, as a file name part, or "" where
// the launcher names no job (or names it with characters a file name must not take). Open MPI's
// job id is a 16-bit hash of mpirun's and a count, so its daemon's address goes in too; a requeued
// Slurm job keeps its id, so its restart count goes in. `with_srun_ports`: for Slurm, the
// launching srun's ports too, for a file that cannot say which process wrote it (torch's
// FileStore), so that one an earlier launch of the same step left is not found.
std::string launch_job_key(const Launcher& by, bool with_srun_ports = false);

} // namespace chorus
