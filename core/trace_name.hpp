// The name of the file a process's trace goes to (CHORUS_TRACE, Config::trace_file): `%p` in the
// pattern becomes the process id, `%n` the node id (0 in one process), `%%` a `%`. In multi-node
// mode a pattern with neither `%p` nor `%n` gets ".nodeN" before its extension (trace.json:
// trace.node1.json), so that node processes of one host never write the same file; a node that
// never joined has no id and writes "pidPID" instead (trace.pid4242.json). Here, in core,
// because Config::validate checks patterns.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace chorus {

// What is wrong with a pattern ("" when nothing): a `%` followed by anything but p, n or %.
std::string trace_pattern_problem(std::string_view pattern);

// The file name for this process (the pattern must have no problem). `node` < 0: not known.
std::string trace_file_name(std::string_view pattern, int64_t pid, int64_t node, bool multi_node);

} // namespace chorus
