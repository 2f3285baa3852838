// What each op does in the arena (strategies/arena.hpp) once every peer's call is posted and they
// agree: every peer reads the inputs it needs where the others posted them and writes only its
// own output, in one pass. Reductions fold the n inputs in rank order in one call of reduce_n, so
// every peer's result is bit-identical for every dtype and reduce op (as one-shot's across nodes).
#pragma once
#include <cstddef>
#include <cstdint>

#include <chorus/status.hpp>
#include <chorus/types.hpp>

#include "core/op_desc.hpp"
#include "strategies/arena.hpp"

namespace chorus {

// An op as peer `rank` of `n` runs it in the arena.
struct ArenaOp : OpDesc {
  uint32_t n = 1;     // peers of the op
  uint32_t rank = 0;  // this peer's

  ArenaOp() = default;
  ArenaOp(const OpDesc& op, uint32_t n_, uint32_t rank_) : OpDesc(op), n(n_), rank(rank_) {}
  bool at_root() const { return rank == static_cast<uint32_t>(root); }
  // The op of a call every peer posted alike (strategies/arena.hpp), for peer `rank` of `n`.
  static ArenaOp of(const ArenaCall& c, uint32_t n, uint32_t rank) {
    return {OpDesc::of(c.kind, c.dtype, c.redop, static_cast<int>(c.root), static_cast<std::size_t>(c.count)), n, rank};
  }
};

// How many bytes of `rank`'s input the op posts into its slot (0: none, e.g. a broadcast's
// receivers or a barrier).
std::size_t arena_input_bytes(const ArenaOp& op);

// The op's data phase for this peer: `out` is its output (null where it has none: a reduce's or
// gather's non-roots, a barrier; it may be the input, in place). An error only when a slot read
// was overwritten meanwhile (this peer was held up past the others' timeout).
Status run_arena_op(const Arena& arena, uint64_t seq, const ArenaOp& op, void* out);

} // namespace chorus
