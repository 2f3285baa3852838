// chorus-bench --nodes M without --orchestrator: starts chorus-orchestrator (next to this
// executable) on a free loopback port and M node processes of this same program joined to it,
// forwards rank 0's table, stops everything, and reports any node that failed or hung.
#pragma once
#include <cstddef>
#include <vector>

#include "options.hpp"

namespace chorus::bench {

// Returns the exit status of the whole run (0: every node ran every row with no wrong value).
int launch(int argc, char** argv, const Options& o, const std::vector<std::size_t>& sizes);

} // namespace chorus::bench
