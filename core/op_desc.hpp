// One collective op, described once: which op of which group it is, and what its peers agree on.
// The layers that describe an op hold one rather than repeat its fields: the planner's question
// (PlanQuery, strategies/planner.hpp), what a meeting's peers agreed on (OpShape,
// actors/local_server/op_validation.hpp), an op in the arena (ArenaOp, strategies/arena_ops.hpp),
// the op the executor runs (OpPlan, strategies/executor.hpp), a device run (gpu::DeviceCollective)
// and one NCCL rank's part (gpu::NcclRankOp), each adding what it alone needs; and the records
// of an op: what a peer tells the flight recorder and the trace (FlightOp) and the recorder's row
// (FlightRow); and a peer's request to the local server (OpRequestData).
#pragma once
#include <cstddef>
#include <cstdint>

#include <chorus/types.hpp>

namespace chorus {

struct OpDesc {
  OpKind kind = OpKind::barrier;
  uint32_t group = 0;  // 0: the world
  uint64_t seq = 0;    // the op's number in its group, in call order
  DType dtype = DType::f32;
  ReduceOp redop = ReduceOp::sum;  // ops that reduce (core/op_kinds.hpp's reduces)
  int root = 0;                    // rooted ops: the root's rank in the group; else 0
  std::size_t count = 0;           // elements per peer, in the sense of strategies/schedule.hpp
  bool on_device = false;          // GPU tensors

  // What the data of an op is, field by field (group and sequence 0, host tensors).
  static OpDesc of(OpKind kind, DType dtype, ReduceOp redop, int root, std::size_t count) {
    OpDesc d;
    d.kind = kind, d.dtype = dtype, d.redop = redop, d.root = root, d.count = count;
    return d;
  }
};

} // namespace chorus
