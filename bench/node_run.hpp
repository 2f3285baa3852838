// chorus-bench as one node process of a multi-node collective (joined through --orchestrator): its
// peers register, the sweep runs over every peer of every node, or inside --group (global ranks).
#pragma once
#include <cstddef>
#include <vector>

#include "options.hpp"

namespace chorus::bench {

// Returns the process's exit status (see --help).
int run_node(const Options& o, const std::vector<std::size_t>& sizes);

} // namespace chorus::bench
