// The orchestrator's shared secret as chorus reads it (chorus-orchestrator, chorus-ctl, Config::from_env):
// from the environment or a file rather than the command line, where ps shows it to every user of
// the host.
#pragma once
#include <cstddef>
#include <string>

#include <chorus/result.hpp>

namespace chorus {

// CHORUS_SECRET, or "" when it is unset or empty.
std::string secret_from_env();
// The first line of `path` (a file only the job's users can read), or why it cannot be read.
Result<std::string> read_secret_file(const std::string& path);
// A fresh secret: 32 bytes of the kernel's random source, in hex (a job that was given none, such
// as the orchestrator rank 0 hosts on one host, or chorus-run's).
Result<std::string> draw_secret();
// `n` bytes of the kernel's random source into `out`, or why there are none.
Status random_bytes(void* out, std::size_t n);

} // namespace chorus
