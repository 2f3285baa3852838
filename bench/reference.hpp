// Inputs and expected results for the benchmark's correctness check, computed independently of
// the library: every input element is a small integer picked so that the result is exact where the
// dtype allows it, and the expected result is computed in int64 (integers) or double (floats)
// arithmetic, then converted to the dtype. None of the library's reduction kernels is used; only
// its scalar f32 -> f16/bf16 narrowing stores the (exactly representable) integer inputs.
#pragma once
#include <cstddef>
#include <cstdint>

#include <chorus/types.hpp>
#include "options.hpp"

namespace chorus::bench {

// The input element peer `rank` holds at index i, for one (dtype, op, redop, peer count).
class Pattern {
 public:
  Pattern(DType dtype, BenchOp op, ReduceOp redop, uint32_t peers);
  int64_t value(uint32_t rank, std::size_t i) const;
  DType dtype() const { return dtype_; }

 private:
  enum class Mode { copy, arith, prod, band, bor, bxor };
  DType dtype_;
  Mode mode_;
  bool is_signed_;
  int bits_;
  uint64_t modulus_;   // copy / arith: values cycle through `modulus_` consecutive integers
  int64_t offset_;     // ... starting at -offset_
  uint32_t prod_twos_; // prod: only peers below this may contribute a factor 2
};

// The expected value of one element: exact (tolerance 0) or within `tol` (floats only).
struct Expected {
  double f = 0;     // floats
  int64_t i = 0;    // integers, already wrapped to the dtype
  double tol = 0;
};

// Expected results of the reductions (ReduceOp over the peers' patterns) and of copies.
class Reference {
 public:
  Reference(const Pattern& pattern, ReduceOp redop, uint32_t peers);
  // Reduction over every peer of pattern.value(r, i).
  Expected reduced(std::size_t i) const;
  // A plain copy of pattern.value(rank, i).
  Expected copied(uint32_t rank, std::size_t i) const;

 private:
  Expected from_double(double v, bool exact_range) const;
  Expected from_int(int64_t v) const;
  const Pattern& pattern_;
  ReduceOp redop_;
  uint32_t peers_;
  double eps_;            // one unit in the last place relative to 1, per float dtype
  double exact_limit_;    // integers of magnitude up to this are exact in the float dtype
};

// Buffers in the dtype: write the pattern, a sentinel (NaN for floats, 0xA5 bytes for integers).
void fill_pattern(const Pattern& p, uint32_t rank, void* dst, std::size_t first, std::size_t count);
void fill_sentinel(DType t, void* dst, std::size_t count);

// Whether element i of `buf` (dtype t) matches e. Reads f16/bf16 with this file's own decoders.
bool matches(DType t, const void* buf, std::size_t i, const Expected& e);

// Wraps an integer to the range of an integer dtype (two's complement, like a cast).
int64_t wrap_to(DType t, int64_t v);

} // namespace chorus::bench
