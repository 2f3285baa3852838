// The flight recorder's file: plain text, one line per op, `key=value` fields (strings quoted),
// so that it reads with grep as well as with `chorus-ctl flight`:
//   # chorus flight recorder, format 1
//   process pid=4242 node=1 host="box" written_ns=... world=4 reason="all_reduce f32[4] sum #7 failed ..."
//   op peer=2 rank=2 group=0 seq=7 kind=all_reduce dtype=f32 shape=4 redop=sum root=0 other=0
//      tag=0 bytes=16 strategy="ring" state=failed enter_ns=... matched_ns=0 exit_ns=... error="..."
// (one line; shape is dims joined by 'x', "-" for none; seq is "-" for send/recv; world is -1
// before a node has joined, and absent from older files).
#pragma once
#include <string>
#include <string_view>

#include <chorus/result.hpp>
#include "observability/flight/flight_row.hpp"

namespace chorus {

std::string write_flight_dump(const FlightDump& d);
// Reads a dump back; an error names the line that does not parse.
Result<FlightDump> parse_flight_dump(std::string_view text);
// Writes `d` to `path` (under a name of its own beside it first, then renamed: a reader never
// sees half a file, and two dumps at once do not mix) and returns the path. `spare`: a file made
// ahead (flight_spare.hpp; -1: none) that is written and named instead; closed here.
Result<std::string> write_flight_file(const std::string& path, const FlightDump& d, int spare = -1);

} // namespace chorus
