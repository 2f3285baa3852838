// One peer's view of an op's work buffer (see strategies/schedule.hpp): which memory backs each
// element range (the caller's output, or scratch allocated only when first written) and which
// ranges still hold their initial content elsewhere (the caller's input). Initial content is copied
// lazily: a send of untouched input exposes the input itself, and the first reduction into a range
// reads the input directly, so an out-of-place all-reduce never copies input to output first.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include <chorus/types.hpp>

namespace chorus {

class WorkBuffer {
 public:
  // Binds the work buffer of rank `p` for one op. `in`/`out` are the caller's buffers (either may
  // be null where the op has none for this rank; in == out means in place).
  static WorkBuffer bind(OpKind op, int p, int n, int root, std::size_t count, DType dtype,
                         const std::byte* in, std::byte* out);

  // Where a send of [off, off+cnt) reads from (the input itself while that range is untouched).
  const std::byte* read_ptr(std::size_t off, std::size_t cnt);
  // [off, off+cnt) = [off, off+cnt) (op) src, taking untouched ranges from the initial content.
  void reduce_from(std::size_t off, std::size_t cnt, const std::byte* src, ReduceOp op);
  // [off, off+cnt) = [off, off+cnt) (op) srcs[0] (op) ... (op) srcs[nsrc-1], in one pass.
  void reduce_many(std::size_t off, std::size_t cnt, const std::byte* const* srcs, std::size_t nsrc,
                   ReduceOp op);
  // The memory behind [off, off+cnt), to be filled by the caller (a receive straight from the
  // socket): the range counts as written from now on.
  std::byte* write_ptr(std::size_t off, std::size_t cnt);
  // Where bytes to be reduced into [off, off+cnt) may be received: the region's own memory, when
  // all of it still holds its initial content elsewhere (memory apart from it), so reduce_from
  // with src = that memory folds the two in place; null otherwise. Changes nothing but
  // giving scratch its memory.
  std::byte* landing_ptr(std::size_t off, std::size_t cnt);
  // [off, off+cnt) = src.
  void copy_from(std::size_t off, std::size_t cnt, const std::byte* src);
  // [dst, dst+cnt) = [src, src+cnt), both in this work buffer.
  void local_copy(std::size_t dst, std::size_t src, std::size_t cnt);
  // Writes what the caller must see: result blocks copied out, untouched output ranges filled.
  void finish();

 private:
  struct Part { std::size_t begin, end; std::byte* mem; bool scratch; };
  struct Pending { std::size_t begin, end; const std::byte* src; };  // src = element `begin`
  struct FinalCopy { std::size_t begin, count; std::byte* dst; };

  Part& part_for(std::size_t off, std::size_t cnt);
  std::byte* mem_at(std::size_t off, std::size_t cnt);
  void materialize(std::size_t off, std::size_t cnt);
  void forget_pending(std::size_t off, std::size_t cnt);
  void add_pending(std::size_t begin, std::size_t end, const std::byte* src);

  DType dtype_ = DType::f32;
  std::size_t esize_ = 4;
  std::vector<Part> parts_;
  std::vector<Pending> pending_;  // sorted, disjoint
  std::vector<FinalCopy> finals_;
  std::vector<std::shared_ptr<std::byte>> scratch_;
};

} // namespace chorus
