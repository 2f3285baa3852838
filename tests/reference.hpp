// An independent reference for the collective tests: element access by dtype, the reduction of
// one element over the peers in double / 64-bit integer arithmetic, and comparison helpers.
// It deliberately shares nothing with strategies/reduce_kernels.* except the scalar f16/bf16
// conversions (f16_to_f32 and friends), which are tested on their own in reduce_kernels_test.
//
// Conventions:
//   * floating values travel as double: reading an element is exact; writing rounds to the dtype
//     (f16/bf16 through f32, which is exact whenever the value is representable, the only case
//     the tests compare bit for bit);
//   * integer values travel as int64_t, sign-extended for signed types and zero-extended for
//     unsigned ones; writing truncates to the type's width (wraps modulo 2^bits);
//   * integer sum/prod wrap modulo 2^bits (computed in uint64_t, then truncated); avg is the
//     exact sum divided by n, truncated toward zero (callers keep avg inputs small so the sum
//     cannot wrap); min/max compare as the signed/unsigned type.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <chorus/types.hpp>
#include "strategies/reduce_kernels.hpp"  // only f16_to_f32 / f32_to_f16 / bf16_to_f32 / f32_to_bf16

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

inline double get_f(DType t, const void* base, std::size_t i) {
  const auto* b = static_cast<const unsigned char*>(base);
  switch (t) {
    case DType::f16: { uint16_t h; std::memcpy(&h, b + 2 * i, 2); return f16_to_f32(h); }
    case DType::bf16: { uint16_t h; std::memcpy(&h, b + 2 * i, 2); return bf16_to_f32(h); }
    case DType::f32: { float f; std::memcpy(&f, b + 4 * i, 4); return f; }
    case DType::f64: { double d; std::memcpy(&d, b + 8 * i, 8); return d; }
    default: return 0;
  }
}

inline void set_f(DType t, void* base, std::size_t i, double v) {
  auto* b = static_cast<unsigned char*>(base);
  switch (t) {
    case DType::f16: { uint16_t h = f32_to_f16(static_cast<float>(v)); std::memcpy(b + 2 * i, &h, 2); break; }
    case DType::bf16: { uint16_t h = f32_to_bf16(static_cast<float>(v)); std::memcpy(b + 2 * i, &h, 2); break; }
    case DType::f32: { float f = static_cast<float>(v); std::memcpy(b + 4 * i, &f, 4); break; }
    case DType::f64: std::memcpy(b + 8 * i, &v, 8); break;
    default: break;
  }
}

// Truncates v to the width of t and sign- or zero-extends it back.
inline int64_t wrap(DType t, uint64_t v) {
  switch (t) {
    case DType::i8: return static_cast<int8_t>(static_cast<uint8_t>(v));
    case DType::u8: return static_cast<uint8_t>(v);
    case DType::i32: return static_cast<int32_t>(static_cast<uint32_t>(v));
    case DType::i64: return static_cast<int64_t>(v);
    default: return 0;
  }
}

inline int64_t get_i(DType t, const void* base, std::size_t i) {
  const auto* b = static_cast<const unsigned char*>(base);
  switch (t) {
    case DType::i8: return static_cast<int8_t>(b[i]);
    case DType::u8: return b[i];
    case DType::i32: { int32_t x; std::memcpy(&x, b + 4 * i, 4); return x; }
    case DType::i64: { int64_t x; std::memcpy(&x, b + 8 * i, 8); return x; }
    default: return 0;
  }
}

inline void set_i(DType t, void* base, std::size_t i, int64_t v) {
  auto* b = static_cast<unsigned char*>(base);
  switch (t) {
    case DType::i8: case DType::u8: b[i] = static_cast<uint8_t>(v); break;
    case DType::i32: { auto x = static_cast<uint32_t>(v); std::memcpy(b + 4 * i, &x, 4); break; }
    case DType::i64: std::memcpy(b + 8 * i, &v, 8); break;
    default: break;
  }
}

// ---- one element reduced over the peers -------------------------------------------------------

// Exact in double for the values the tests use; avg = sum / n.
inline double reduce_f(ReduceOp op, const double* v, std::size_t n) {
  double r = v[0];
  for (std::size_t i = 1; i < n; ++i) {
    switch (op) {
      case ReduceOp::sum: case ReduceOp::avg: r += v[i]; break;
      case ReduceOp::prod: r *= v[i]; break;
      case ReduceOp::min: r = v[i] < r ? v[i] : r; break;
      case ReduceOp::max: r = v[i] > r ? v[i] : r; break;
      default: break;
    }
  }
  if (op == ReduceOp::avg) r /= static_cast<double>(n);
  return r;
}

// Integer reduction with the wrap-around of the dtype's width; see the conventions above.
inline int64_t reduce_i(DType t, ReduceOp op, const int64_t* v, std::size_t n) {
  if (op == ReduceOp::avg) {
    int64_t s = 0;
    for (std::size_t i = 0; i < n; ++i) s += v[i];
    return wrap(t, static_cast<uint64_t>(s / static_cast<int64_t>(n)));  // C++ '/' truncates toward 0
  }
  if (op == ReduceOp::min || op == ReduceOp::max) {
    int64_t r = v[0];
    for (std::size_t i = 1; i < n; ++i) {
      if (op == ReduceOp::min && v[i] < r) r = v[i];
      if (op == ReduceOp::max && v[i] > r) r = v[i];
    }
    return r;
  }
  uint64_t r = static_cast<uint64_t>(v[0]);
  for (std::size_t i = 1; i < n; ++i) {
    const uint64_t x = static_cast<uint64_t>(v[i]);
    switch (op) {
      case ReduceOp::sum: r += x; break;
      case ReduceOp::prod: r *= x; break;
      case ReduceOp::band: r &= x; break;
      case ReduceOp::bor: r |= x; break;
      case ReduceOp::bxor: r ^= x; break;
      default: break;
    }
  }
  return wrap(t, r);
}

// ---- expectations and comparison --------------------------------------------------------------

// What a buffer should hold: exact bytes, or (tol > 0, floating dtypes) values within
// tol * scale[i] (scale defaults to |value[i]|) of value[i].
struct Expected {
  DType dtype = DType::u8;
  std::vector<unsigned char> bytes;  // always filled (the rounded expectation)
  std::vector<double> value;         // only for tolerance comparisons
  std::vector<double> scale;         // optional, same length as value
  double tol = 0;
};

inline std::string hex_bytes(const unsigned char* p, std::size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s = "0x";
  for (std::size_t i = n; i-- > 0;) { s += d[p[i] >> 4]; s += d[p[i] & 15]; }  // little endian
  return s;
}

inline std::string show_elem(DType t, const void* base, std::size_t i) {
  const std::size_t es = esize(t);
  std::string raw = hex_bytes(static_cast<const unsigned char*>(base) + i * es, es);
  if (floating(t)) return std::to_string(get_f(t, base, i)) + " (" + raw + ")";
  return std::to_string(get_i(t, base, i)) + " (" + raw + ")";
}

// "" when `got` (count elements of dtype) matches; otherwise the first mismatch and how many.
inline std::string compare(const void* got, const Expected& e, std::size_t count) {
  const std::size_t es = esize(e.dtype);
  const auto* g = static_cast<const unsigned char*>(got);
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < count; ++i) {
    bool ok;
    if (e.tol > 0 && floating(e.dtype)) {
      const double x = get_f(e.dtype, got, i), want = e.value[i];
      const double sc = e.scale.empty() ? std::fabs(want) : e.scale[i];
      ok = std::fabs(x - want) <= e.tol * sc || x == want;
    } else {
      ok = std::memcmp(g + i * es, e.bytes.data() + i * es, es) == 0;
    }
    if (!ok && bad++ == 0) first = i;
  }
  if (bad == 0) return "";
  std::string msg = std::to_string(bad) + " of " + std::to_string(count) + " elements differ; first at " +
                    std::to_string(first) + ": got " + show_elem(e.dtype, got, first) + ", expected " +
                    show_elem(e.dtype, e.bytes.data(), first);
  if (e.tol > 0) msg += " (exact " + std::to_string(e.value[first]) + ", tol " + std::to_string(e.tol) + ")";
  return msg;
}

// Byte-for-byte comparison of two buffers of `count` elements of dtype t.
inline std::string compare_bytes(DType t, const void* got, const void* want, std::size_t count) {
  Expected e;
  e.dtype = t;
  e.bytes.assign(static_cast<const unsigned char*>(want),
                 static_cast<const unsigned char*>(want) + count * esize(t));
  return compare(got, e, count);
}

} // namespace chorus::ref
