// One local peer's part of the process's trace (trace.hpp): a span per op, with the wait for its
// plan and the steps the executor ran inside it, written through the hooks of
// runtime/peer/run_op.hpp beside the flight recorder's; the Runtime reads it when it writes the
// file. A peer's calls may overlap (send and recv from several threads, a group handle's op beside
// the world's): each call fills its own OpSpan, and what lands in the logs goes in under a lock
// that only the trace, when on, takes.
#pragma once
#include <array>
#include <cstdint>
#include <forward_list>
#include <mutex>
#include <string>

#include <chorus/status.hpp>
#include <chorus/types.hpp>
#include "observability/flight/flight_recorder.hpp"
#include "observability/trace/span_log.hpp"
#include "strategies/step_trace.hpp"
#include "strategies/tuning.hpp"

namespace chorus {

inline constexpr std::size_t kTraceDims = 4;  // dimensions of a shape kept (the rank is kept too)

// One op of one peer: the op's span, and its wait for the plan (entered until matched).
struct OpSpan {
  uint64_t begin = 0, matched = 0, end = 0;  // flight_clock readings; matched 0: never matched
  FlightOp op;  // as the peer entered it, without its tensor (`data` is null); op.op has its dtype and count
  uint64_t bytes = 0;
  bool has_data = false;  // dtype and shape are known (barrier: none)
  uint8_t dims = 0;       // the shape's rank; its first kTraceDims sizes are in `shape`
  std::array<int64_t, kTraceDims> shape{};
  RunStrategy strategy;
  const std::string* error = nullptr;  // failed: how (kept by the PeerTrace)
};

// One step of the executor, or (conclude) the wait for the other nodes' outcome of the op.
struct StepRecord {
  StepSpan span;
  uint64_t end = 0;
  bool conclude = false;
};

class PeerTrace final : public StepTrace {
 public:
  explicit PeerTrace(TraceBudget& budget) : ops_(budget), steps_(budget) {}

  // The op hooks, on the call's own span: entered, matched (the plan came), ended (logged).
  void begin(OpSpan& o, const FlightOp& op);
  void matched(OpSpan& o, const RunStrategy& strategy);
  void end(OpSpan& o, const Status& status);

  // The executor's (StepTrace).
  uint64_t now() override;
  void step(const StepSpan& s) override;
  void concluded(uint64_t begin) override;

  const SpanLog<OpSpan>& ops() const { return ops_; }
  const SpanLog<StepRecord>& steps() const { return steps_; }
  uint64_t dropped() const { return ops_.dropped() + steps_.dropped(); }

 private:
  std::mutex mu_;  // the logs and errors_: calls of the peer may end at once
  SpanLog<OpSpan> ops_;
  SpanLog<StepRecord> steps_;
  std::forward_list<std::string> errors_;  // what failed ops' records point to; grows at the front only
};

} // namespace chorus
