// The job's secret, which the orchestrator's door asks of every node: --secret-file's first line,
// else CHORUS_SECRET_FILE's, else CHORUS_SECRET, else one drawn for this job (chorus-run hands it
// to the processes itself).
#pragma once
#include <string>

#include <chorus/result.hpp>

namespace chorus::launch {

// `secret_file` "": not given. Errors: invalid_argument for a file that cannot be read or whose
// first line is empty, and for a secret holding a newline (a remote process reads one line);
// internal when no random bytes could be had.
Result<std::string> job_secret(const std::string& secret_file);

} // namespace chorus::launch
