// How the ranks of one host find rank 0's orchestrator when their launcher (mpirun, srun) names no
// address: rank 0 listens on a free port and writes the port, and the secret it drew, to a file
// named by the job (Config::rendezvous_file); the others wait for that file. The file lies in a
// directory only this user may enter, made so if missing and refused if it is anyone else's or
// open to others: a file planted by another user could send the ranks to that user's
// orchestrator. The file names the process that wrote it (pid and start time): a file left by a
// rank 0 that is gone (killed before it could remove it) is not read, so a job whose id comes
// round again waits for its own rank 0 rather than trying a dead port.
#pragma once
#include <cstdint>
#include <string>

#include <chorus/result.hpp>
#include "core/wait.hpp"

namespace chorus {

struct Rendezvous {
  uint16_t port = 0;
  std::string secret;
  // Where the job's processes reach the orchestrator ("": not said, loopback). chorus-run's join
  // file names it, so that newcomers (chorus-run --join, --hosts too) reach it as the job does.
  std::string host{};
};

// Written whole or not at all (a temporary file renamed into place), readable by this user only,
// naming this process as its writer.
Status write_rendezvous(const std::string& path, const Rendezvous& r);
// Waits (polling, with backoff) until the file is there and its writer still runs, then reads it;
// a timeout names the file.
Result<Rendezvous> read_rendezvous(const std::string& path, Clock::time_point deadline);

} // namespace chorus
