// The orchestrator's shared secret as chorus's programs read it (chorus-orchestrator, chorus-ctl):
// from the environment or a file rather than the command line, where ps shows it to every user of
// the host.
#pragma once
#include <string>

#include <chorus/result.hpp>

namespace chorus {

// CHORUS_SECRET, or "" when it is unset or empty.
std::string secret_from_env();
// The first line of `path` (a file only the job's users can read), or why it cannot be read.
Result<std::string> read_secret_file(const std::string& path);

} // namespace chorus
