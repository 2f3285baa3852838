// Finding the program to exec as execvp would, but before the fork: chorus-run has threads (the
// orchestrator's), so the child does nothing between fork and exec that could allocate.
#pragma once
#include <string>

#include <chorus/result.hpp>

namespace chorus::launch {

// `name` itself when it has a '/'; else the first executable file of that name in PATH (the
// default /usr/local/bin:/usr/bin:/bin when PATH is unset). The error is "NAME: " and what
// execvp's errno would say: "No such file or directory", or "Permission denied" when a file of
// that name is there but not executable.
Result<std::string> find_program(const std::string& name);

} // namespace chorus::launch
