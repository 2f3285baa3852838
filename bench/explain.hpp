// chorus-bench --explain: the planner's decision (strategies/planner.hpp) for every size of the
// sweep, made from the options alone as the peers would ask it; nothing runs.
#pragma once
#include <cstddef>
#include <vector>

#include "options.hpp"

namespace chorus::bench {

// Prints one row per size; returns the exit status.
int explain(const Options& o, const std::vector<std::size_t>& sizes);

} // namespace chorus::bench
