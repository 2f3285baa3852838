#include "strategies/arena_ops.hpp"

#include <cstring>
#include <string>
#include <vector>

#include "strategies/reduce_kernels.hpp"

namespace chorus {

namespace {

// Folds block `block` (in elements of count) of every peer's input, in rank order, into `out`.
void fold(const Arena& a, uint64_t seq, const ArenaOp& op, std::size_t block, void* out) {
  const std::size_t es = dtype_size(op.dtype), off = block * op.count * es;
  // Small ops (the arena's) have few peers: the sources fit on the stack for the common case.
  const void* few[16];
  std::vector<const void*> many;
  const void** srcs = few;
  if (op.n > 16) {
    many.resize(op.n);
    srcs = many.data();
  }
  for (uint32_t r = 0; r < op.n; ++r) srcs[r] = a.input_of(r, seq) + off;
  reduce_n(op.dtype, op.redop, out, srcs, op.n, op.count);
  if (op.redop == ReduceOp::avg) divide_by(op.dtype, out, op.count, op.n);
}

} // namespace

std::size_t arena_input_bytes(const ArenaOp& op) {
  const std::size_t es = dtype_size(op.dtype), block = op.count * es;
  switch (op.kind) {
    case OpKind::all_reduce:
    case OpKind::reduce:
    case OpKind::all_gather:
    case OpKind::gather: return block;
    case OpKind::reduce_scatter:
    case OpKind::all_to_all: return block * op.n;
    case OpKind::broadcast: return op.at_root() ? block : 0;
    case OpKind::scatter: return op.at_root() ? block * op.n : 0;
    default: return 0;
  }
}

Status run_arena_op(const Arena& a, uint64_t seq, const ArenaOp& op, void* out) {
  const std::size_t es = dtype_size(op.dtype), block = op.count * es;
  auto* o = static_cast<std::byte*>(out);
  bool read_all = false, read_root = false;
  switch (op.kind) {
    case OpKind::all_reduce:
      if (op.count) fold(a, seq, op, 0, out);
      read_all = true;
      break;
    case OpKind::reduce:
      if (op.at_root() && op.count && out) fold(a, seq, op, 0, out);
      read_all = op.at_root();
      break;
    case OpKind::reduce_scatter:
      if (op.count) fold(a, seq, op, op.rank, out);
      read_all = true;
      break;
    case OpKind::broadcast:
      if (!op.at_root() && block) std::memcpy(o, a.input_of(op.root, seq), block);
      read_root = !op.at_root();
      break;
    case OpKind::scatter:
      if (block) std::memcpy(o, a.input_of(op.root, seq) + op.rank * block, block);
      read_root = true;
      break;
    case OpKind::all_gather:
      if (block)
        for (uint32_t r = 0; r < op.n; ++r) std::memcpy(o + r * block, a.input_of(r, seq), block);
      read_all = true;
      break;
    case OpKind::gather:
      if (op.at_root() && block && out)
        for (uint32_t r = 0; r < op.n; ++r) std::memcpy(o + r * block, a.input_of(r, seq), block);
      read_all = op.at_root();
      break;
    case OpKind::all_to_all:
      if (block)
        for (uint32_t r = 0; r < op.n; ++r) std::memcpy(o + r * block, a.input_of(r, seq) + op.rank * block, block);
      read_all = true;
      break;
    default: break;  // a barrier: meeting was all of it
  }
  // Every slot read must still hold this op: only a peer held up past the others' timeout can find
  // one taken by a later op, and then what it read is not this op's.
  bool intact = true;
  if (read_all)
    for (uint32_t r = 0; r < op.n; ++r) intact = intact && a.still_holds(r, seq);
  if (read_root) intact = a.still_holds(op.root, seq);
  if (!intact)
    return {Errc::timeout, std::string(to_string(op.kind)) + " #" + std::to_string(seq) +
                               ": this peer was held up so long that the other peers moved on to later ops (its "
                               "inputs were overwritten before it read them)"};
  return Status::ok();
}

} // namespace chorus
