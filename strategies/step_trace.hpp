// What the executor tells a trace about the steps of one peer's program (the trace itself lives
// in observability/trace/, above this layer). OpPlan::run takes one only for a traced op and picks a
// program loop without any timing otherwise, so an op without a trace pays nothing per step.
#pragma once
#include <cstddef>
#include <cstdint>

#include "strategies/schedule.hpp"

namespace chorus {

// One step as the trace shows it.
struct StepSpan {
  StepKind kind = StepKind::copy;
  bool remote = false;   // the partner is on another node (RemoteSteps)
  bool post = false;     // remote sends: handing the data to the connection (else: waiting until it went)
  int peer = -1;         // the partner's rank in the op; -1: a local copy or reduce
  uint32_t sources = 1;  // receive-and-reduce steps fused into one pass over their sources
  std::size_t bytes = 0;
  uint64_t begin = 0;    // StepTrace::now() when the step began; it ends when step() is called
};

class StepTrace {
 public:
  virtual uint64_t now() = 0;
  virtual void step(const StepSpan& s) = 0;
  // Across nodes: the wait for the other nodes' outcome of the op (RemoteSteps::conclude), from
  // `begin` until now.
  virtual void concluded(uint64_t begin) = 0;

 protected:
  ~StepTrace() = default;
};

} // namespace chorus
