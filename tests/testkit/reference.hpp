// The expected results of collectives, computed independently of the library, for the tests and
// for chorus-bench's check of every result it times: element access by dtype, one element reduced
// over the peers in double / 64-bit integer arithmetic, whole-buffer expectations and their
// comparison (the tests), and the bench's input patterns with per-element expectations. Nothing of
// strategies/reduce_kernels.* is used but the scalar narrowing f32 -> f16/bf16 when writing
// (exact for every value compared bit for bit); f16/bf16 are read with decoders of this file's own.
//
// Conventions:
//   * floating values travel as double: reading an element is exact; writing rounds to the dtype
//     (f16/bf16 through f32, which is exact whenever the value is representable, the only case
//     compared bit for bit);
//   * integer values travel as int64_t, sign-extended for signed types and zero-extended for
//     unsigned ones; writing truncates to the type's width (wraps modulo 2^bits);
//   * integer sum/prod wrap modulo 2^bits; avg divides the wrapped sum by n, truncating toward
//     zero (as the library does); min/max compare as the signed/unsigned type.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <chorus/types.hpp>

namespace chorus::ref {

inline bool is_signed_int(DType t) { return t == DType::i8 || t == DType::i32 || t == DType::i64; }
inline std::size_t esize(DType t) {
  switch (t) {
    case DType::f16: case DType::bf16: return 2;
    case DType::f32: case DType::i32: return 4;
    case DType::f64: case DType::i64: return 8;
    case DType::i8: case DType::u8: return 1;
  }
  return 0;
}
inline bool floating(DType t) {
  return t == DType::f16 || t == DType::bf16 || t == DType::f32 || t == DType::f64;
}

// Unit roundoff of a floating dtype (half an ulp of 1).
inline double unit_roundoff(DType t) {
  switch (t) {
    case DType::f16: return std::ldexp(1.0, -11);
    case DType::bf16: return std::ldexp(1.0, -8);
    case DType::f32: return std::ldexp(1.0, -24);
    case DType::f64: return std::ldexp(1.0, -53);
    default: return 0;
  }
}

// ---- element access --------------------------------------------------------------------------

double get_f(DType t, const void* base, std::size_t i);
void set_f(DType t, void* base, std::size_t i, double v);
int64_t get_i(DType t, const void* base, std::size_t i);
void set_i(DType t, void* base, std::size_t i, int64_t v);
// Truncates v to the width of t and sign- or zero-extends it back.
int64_t wrap(DType t, uint64_t v);

// ---- one element reduced over the peers -------------------------------------------------------

// Exact in double for the values the tests use; avg = sum / n.
double reduce_f(ReduceOp op, const double* v, std::size_t n);
// Integer reduction with the wrap-around of the dtype's width; see the conventions above.
int64_t reduce_i(DType t, ReduceOp op, const int64_t* v, std::size_t n);

// ---- whole buffers: expectations and comparison ------------------------------------------------

// What a buffer should hold: exact bytes, or (tol > 0, floating dtypes) values within
// tol * scale[i] (scale defaults to |value[i]|) of value[i].
struct Expected {
  DType dtype = DType::u8;
  std::vector<unsigned char> bytes;  // always filled (the rounded expectation)
  std::vector<double> value;         // only for tolerance comparisons
  std::vector<double> scale;         // optional, same length as value
  double tol = 0;
};

// "" when `got` (count elements of dtype) matches; otherwise the first mismatch and how many.
std::string compare(const void* got, const Expected& e, std::size_t count);
// Byte-for-byte comparison of two buffers of `count` elements of dtype t.
std::string compare_bytes(DType t, const void* got, const void* want, std::size_t count);

// ---- chorus-bench: input patterns and per-element expectations ---------------------------------

// The input element peer `rank` holds at index i, for one (dtype, op, redop, peer count): small
// integers picked so that the result is exact where the dtype allows it. `reduces`: the op
// reduces (else it only moves data, and the values spread widely so that a misplaced block shows).
class Pattern {
 public:
  Pattern(DType dtype, bool reduces, ReduceOp redop, uint32_t peers);
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
struct ExpectedElement {
  double f = 0;     // floats
  int64_t i = 0;    // integers, already wrapped to the dtype
  double tol = 0;
};

// Expected results of the reductions (ReduceOp over the peers' patterns) and of copies. Not
// thread-safe: one per peer thread (it keeps a scratch row of the peers' values).
class Reference {
 public:
  Reference(const Pattern& pattern, ReduceOp redop, uint32_t peers);
  // Reduction over every peer of pattern.value(r, i).
  ExpectedElement reduced(std::size_t i) const;
  // A plain copy of pattern.value(rank, i).
  ExpectedElement copied(uint32_t rank, std::size_t i) const;

 private:
  ExpectedElement from_double(double v, bool exact_range) const;
  const Pattern& pattern_;
  ReduceOp redop_;
  uint32_t peers_;
  double eps_;            // one unit in the last place relative to 1, per float dtype
  double exact_limit_;    // integers of magnitude up to this are exact in the float dtype
  mutable std::vector<int64_t> ints_;  // one element of every peer
  mutable std::vector<double> floats_;
};

// Buffers in the dtype: write the pattern, a sentinel (NaN for floats, 0xA5 bytes for integers).
void fill_pattern(const Pattern& p, uint32_t rank, void* dst, std::size_t first, std::size_t count);
void fill_sentinel(DType t, void* dst, std::size_t count);

// Whether element i of `buf` (dtype t) matches e.
bool matches(DType t, const void* buf, std::size_t i, const ExpectedElement& e);

} // namespace chorus::ref
