// A process's trace in Chrome's Trace Event Format, the JSON that ui.perfetto.dev and
// chrome://tracing open: {"traceEvents":[...],"displayTimeUnit":"ns","otherData":{...}}, with
// one complete ("X") event per span and metadata ("M") events naming the process ("node N", or
// "process PID" in one process) and one thread per local peer ("rank R", tid R + 1: some
// viewers fold tid 0 into another thread). Times are microseconds with three decimals, counted
// from UTC midnight before the trace began (otherData.origin_unix_s) rather than from 1970, so
// that they stay exact in a double; the files of several nodes share that origin.
#pragma once
#include <cstdint>
#include <memory>
#include <ostream>
#include <vector>

#include "observability/trace/peer_trace.hpp"

namespace chorus {

struct TraceProcess {
  int64_t pid = 0;
  int64_t node = -1;  // multi-node: the node's id (-1: it never joined)
  bool multi_node = false;
  uint32_t first_rank = 0;    // the global rank of local peer 0
  int64_t origin_unix_s = 0;  // where ts counts from
};

// The span names: "all_reduce #7" (collectives: the sequence number), "send to 3", "recv from 3";
// "match"; the executor's steps "send", "recv reduce", "recv copy", "copy", "reduce",
// "remote send", "remote send wait", "remote recv reduce", "remote recv copy", and "conclude".
std::string op_span_name(const OpSpan& op);
std::string_view step_span_name(const StepRecord& s);

// Writes every span the peers published (local peer i is peers[i]).
void write_trace_json(std::ostream& out, const TraceProcess& process,
                      const std::vector<std::unique_ptr<PeerTrace>>& peers);

} // namespace chorus
