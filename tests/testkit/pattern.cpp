// chorus-bench's part of reference.hpp: input patterns whose reductions stay exact where the dtype
// allows it, and the expected value of each element, reduced with reduce_f / reduce_i.
#include <algorithm>
#include <cstring>
#include <limits>

#include "strategies/reduce_kernels.hpp"  // f32_to_f16 / f32_to_bf16 only: narrowing exact integers
#include "testkit/reference.hpp"

namespace chorus::ref {

namespace {

// Largest magnitude a sum of small integers may reach and stay exact (floats) or not wrap (ints).
double exact_sum_limit(DType t) {
  switch (t) {
    case DType::f16: return 2048;
    case DType::bf16: return 256;
    case DType::f32: return 16777216.0;
    case DType::f64: return 9007199254740992.0;
    case DType::i8: return 127;
    case DType::u8: return 255;
    case DType::i32: return 2147483647.0;
    case DType::i64: return 9.2e18;
  }
  return 0;
}

// prod: the largest power of two the dtype holds exactly (and, for integers, without wrapping).
int max_pow2(DType t) {
  switch (t) {
    case DType::i8: return 6;
    case DType::u8: return 7;
    case DType::f16: return 15;
    case DType::i32: return 30;
    case DType::i64: return 62;
    default: return 60;  // bf16, f32, f64: the exponent range is the limit, not the mantissa
  }
}

uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

} // namespace

Pattern::Pattern(DType dtype, bool reduces, ReduceOp redop, uint32_t peers)
    : dtype_(dtype), is_signed_(dtype != DType::u8), bits_(static_cast<int>(esize(dtype) * 8)) {
  if (!reduces) {
    mode_ = Mode::copy;
    // Spread values widely (so misplaced blocks show) but stay exactly representable.
    switch (dtype) {
      case DType::i8: case DType::u8: case DType::bf16: modulus_ = 251; break;
      case DType::f16: modulus_ = 2039; break;
      case DType::f32: modulus_ = 16777213; break;
      default: modulus_ = 2147483629; break;
    }
    offset_ = dtype == DType::u8 ? 0 : static_cast<int64_t>(modulus_ / 2);
  } else if (redop == ReduceOp::prod) {
    mode_ = Mode::prod;
    // A factor 2 comes from peers r < prod_twos_ with (i + r) % 3 == 0: at most
    // ceil(prod_twos_ / 3) of them per element, which keeps the product within max_pow2.
    prod_twos_ = static_cast<uint32_t>(3 * max_pow2(dtype));
  } else if (redop == ReduceOp::band || redop == ReduceOp::bor || redop == ReduceOp::bxor) {
    mode_ = redop == ReduceOp::band ? Mode::band : redop == ReduceOp::bor ? Mode::bor : Mode::bxor;
  } else {
    mode_ = Mode::arith;
    // sum/avg of `peers` values of magnitude <= m stays below the exact limit where possible.
    int64_t m = 100;
    if (redop == ReduceOp::sum || redop == ReduceOp::avg)
      m = std::clamp<int64_t>(static_cast<int64_t>(exact_sum_limit(dtype) / peers), 1, 100);
    if (is_signed_) {
      modulus_ = static_cast<uint64_t>(2 * m + 1);
      offset_ = m;
    } else {
      modulus_ = static_cast<uint64_t>(m + 1);
      offset_ = 0;
    }
  }
}

int64_t Pattern::value(uint32_t rank, std::size_t i) const {
  switch (mode_) {
    case Mode::copy:
      return static_cast<int64_t>((uint64_t{rank} * 1000003u + uint64_t{i} * 7u + 17u) % modulus_) - offset_;
    case Mode::arith:
      return static_cast<int64_t>((uint64_t{i} * 7u + uint64_t{rank} * 13u + 3u) % modulus_) - offset_;
    case Mode::prod:
      if (rank < prod_twos_ && (i + rank) % 3 == 0) return 2;
      if (is_signed_ && (i + 2 * std::size_t{rank}) % 5 == 1) return -1;
      return 1;
    case Mode::band:
    case Mode::bor:
    case Mode::bxor: {
      const uint64_t h = mix((uint64_t{rank} << 40) ^ i);
      const uint64_t two_bits = (uint64_t{1} << (h % static_cast<unsigned>(bits_))) |
                                (uint64_t{1} << ((h >> 8) % static_cast<unsigned>(bits_)));
      return wrap(dtype_, mode_ == Mode::band ? ~two_bits : mode_ == Mode::bor ? two_bits : h);
    }
  }
  return 0;
}

Reference::Reference(const Pattern& pattern, ReduceOp redop, uint32_t peers)
    : pattern_(pattern), redop_(redop), peers_(peers), ints_(peers), floats_(peers) {
  switch (pattern.dtype()) {
    case DType::f16: eps_ = std::ldexp(1.0, -10); break;
    case DType::bf16: eps_ = std::ldexp(1.0, -7); break;
    case DType::f32: eps_ = std::ldexp(1.0, -23); break;
    default: eps_ = std::ldexp(1.0, -52); break;
  }
  exact_limit_ = exact_sum_limit(pattern.dtype());
}

// exact_range: every intermediate of the reduction is an exactly representable integer.
ExpectedElement Reference::from_double(double v, bool exact_range) const {
  ExpectedElement e;
  const DType t = pattern_.dtype();
  const double mag = std::max(1.0, std::fabs(v));
  if (t == DType::f32) e.f = static_cast<double>(static_cast<float>(v));
  else e.f = v;
  if (exact_range && redop_ != ReduceOp::avg) {
    e.tol = 0;  // every partial result is an exactly representable integer: no rounding anywhere
  } else if (t == DType::f16 || t == DType::bf16) {
    // Rounding to the storage type (and, outside the exact range, per reduction step).
    e.tol = eps_ * mag * (exact_range ? 1.0 : static_cast<double>(peers_));
  } else {
    e.tol = 2 * eps_ * mag * (exact_range ? 1.0 : static_cast<double>(peers_));
  }
  return e;
}

ExpectedElement Reference::reduced(std::size_t i) const {
  const DType t = pattern_.dtype();
  if (!floating(t)) {
    for (uint32_t r = 0; r < peers_; ++r) ints_[r] = pattern_.value(r, i);
    return {0, reduce_i(t, redop_, ints_.data(), peers_), 0};
  }
  // A bound on the magnitude of every partial result, whatever order the strategy combines the
  // peers in (sum: sum of magnitudes; prod: product of magnitudes; min/max: the inputs).
  double bound = 0;
  for (uint32_t r = 0; r < peers_; ++r) {
    const double v = static_cast<double>(pattern_.value(r, i)), mag = std::fabs(v);
    floats_[r] = v;
    if (r == 0) bound = mag;
    else if (redop_ == ReduceOp::sum || redop_ == ReduceOp::avg) bound += mag;
    else if (redop_ == ReduceOp::prod) bound *= mag;
    else bound = std::max(bound, mag);
  }
  // prod of the pattern's +-1 and 2 factors is a power of two: exact while the exponent fits.
  const bool exact = bound <= exact_limit_ || (redop_ == ReduceOp::prod && bound <= std::ldexp(1.0, 15));
  return from_double(reduce_f(redop_, floats_.data(), peers_), exact);
}

ExpectedElement Reference::copied(uint32_t rank, std::size_t i) const {
  const int64_t v = pattern_.value(rank, i);
  if (floating(pattern_.dtype())) return {static_cast<double>(v), 0, 0};  // copies are exact, f16/bf16 too
  return {0, wrap(pattern_.dtype(), static_cast<uint64_t>(v)), 0};
}

void fill_pattern(const Pattern& p, uint32_t rank, void* dst, std::size_t first, std::size_t count) {
  // One typed loop per dtype: this fills every input buffer of a sweep, up to gigabytes.
  auto put = [&](auto* d, auto conv) {
    for (std::size_t k = 0; k < count; ++k) d[k] = conv(p.value(rank, first + k));
  };
  switch (p.dtype()) {
    case DType::f16:
      put(static_cast<uint16_t*>(dst), [](int64_t v) { return static_cast<uint16_t>(f32_to_f16(static_cast<float>(v))); });
      break;
    case DType::bf16:
      put(static_cast<uint16_t*>(dst), [](int64_t v) { return static_cast<uint16_t>(f32_to_bf16(static_cast<float>(v))); });
      break;
    case DType::f32: put(static_cast<float*>(dst), [](int64_t v) { return static_cast<float>(v); }); break;
    case DType::f64: put(static_cast<double*>(dst), [](int64_t v) { return static_cast<double>(v); }); break;
    case DType::i8: put(static_cast<int8_t*>(dst), [](int64_t v) { return static_cast<int8_t>(v); }); break;
    case DType::u8: put(static_cast<uint8_t*>(dst), [](int64_t v) { return static_cast<uint8_t>(v); }); break;
    case DType::i32: put(static_cast<int32_t*>(dst), [](int64_t v) { return static_cast<int32_t>(v); }); break;
    case DType::i64: put(static_cast<int64_t*>(dst), [](int64_t v) { return v; }); break;
  }
}

void fill_sentinel(DType t, void* dst, std::size_t count) {
  switch (t) {
    case DType::f16: std::fill_n(static_cast<uint16_t*>(dst), count, uint16_t{0x7e00}); break;
    case DType::bf16: std::fill_n(static_cast<uint16_t*>(dst), count, uint16_t{0x7fc0}); break;
    case DType::f32: std::fill_n(static_cast<float*>(dst), count, std::numeric_limits<float>::quiet_NaN()); break;
    case DType::f64: std::fill_n(static_cast<double*>(dst), count, std::numeric_limits<double>::quiet_NaN()); break;
    default: std::memset(dst, 0xa5, count * esize(t)); break;
  }
}

bool matches(DType t, const void* buf, std::size_t i, const ExpectedElement& e) {
  if (!floating(t)) return get_i(t, buf, i) == e.i;
  const double got = get_f(t, buf, i);
  if (e.tol == 0) return got == e.f;
  return std::fabs(got - e.f) <= e.tol;  // false for NaN
}

} // namespace chorus::ref
