// Flight recorders read side by side (`chorus-ctl flight FILE...`): the dumps of every process of
// a job merged by op, a table per group (its last ops by rank), and the first op where the ranks
// diverge: one that some ranks called and others did not, a call that differs between ranks, or
// one that failed.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "observability/flight/flight_row.hpp"
#include "messages/status_codec.hpp"  // rank_list, rank_phrase

namespace chorus {

struct FlightReportOptions {
  std::size_t last_ops = 20;  // ops per group in the table (0: every op recorded)
};

// The whole report: the files' headers, the tables, the divergence (or where the ranks stand),
// and the sends and receives not done.
std::string flight_report(const std::vector<FlightDump>& dumps, const FlightReportOptions& options = {});

// The first divergence, one line, e.g. "group 0 #7 all_reduce f32[4] sum: ranks 0-2 called it,
// rank 3 did not; rank 3's last op: #6 all_reduce f32[4] sum, done"; "" when the ranks agree. Over
// the ops every rank of a group still records (rings forget their oldest ops). A rank of group 0
// that recorded no op at all (it never called, or its process's dump is not among `dumps`) is
// named too, where a dump says how many peers the job has (FlightDump::world): "...; rank 3: no op
// in these recorders".
std::string first_divergence(const std::vector<FlightDump>& dumps);

// Where the ranks stand when they agree: "ranks 0-3: group 0 #9 all_reduce f32[4] sum, running
// for 2.1 s" (a line per group and state).
std::string where_ranks_stand(const std::vector<FlightDump>& dumps);

} // namespace chorus
