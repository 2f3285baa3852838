// What the reduction kernel tests share: independent references for the f16/bf16 conversions
// (double arithmetic, no bit tricks), per-dtype helpers (a scalar reference of each combine step,
// result comparison, random data), and running a test on one kernel implementation.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <chorus/types.hpp>
#include "strategies/half_float.hpp"
#include "strategies/reduce_kernels.hpp"

namespace chorus::testing {

// ---- independent references for the conversions (double arithmetic, no bit tricks) ----------

// f16 bits -> value, from the IEEE definition.
inline double ref_f16_value(std::uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0) v = std::ldexp(mant, -24);
  else if (exp == 31) v = mant ? std::numeric_limits<double>::quiet_NaN() : INFINITY;
  else v = std::ldexp(mant + 1024, exp - 25);
  return sign ? -v : v;
}

// Round a double (assumed to carry the exact value) to the nearest-even f16 / bf16.
// p = significand bits including the implicit one, emin = minimum normal exponent,
// inf_bits = the +inf pattern, overflow = smallest magnitude that rounds to inf.
inline std::uint16_t ref_round(double v, int p, int emin, std::uint16_t inf_bits, double overflow,
                        std::uint16_t qnan) {
  if (std::isnan(v)) return qnan;
  const std::uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const double a = std::fabs(v);
  if (a >= overflow) return sign | inf_bits;
  if (a == 0) return sign;
  int e;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): unbiased exponent e - 1
  int unbiased = std::max(e - 1, emin);
  double q = std::ldexp(a, -(unbiased - (p - 1)));  // significand scaled to an integer grid
  double r = std::nearbyint(q);                       // default rounding mode: ties to even
  auto ri = static_cast<std::uint32_t>(r);
  std::uint32_t bits;
  if (e - 1 < emin) bits = ri;  // subnormal (ri == 2^(p-1) gives the smallest normal)
  else bits = (static_cast<std::uint32_t>(unbiased - emin + 1) << (p - 1)) + (ri - (1u << (p - 1)));
  return static_cast<std::uint16_t>(sign | bits);
}
inline std::uint16_t ref_to_f16(double v) { return ref_round(v, 11, -14, 0x7c00, 65520.0, 0x7e00); }
inline std::uint16_t ref_to_bf16(double v) {
  return ref_round(v, 8, -126, 0x7f80, std::ldexp(2.0 - std::ldexp(1.0, -8), 127), 0x7fc0);
}

inline bool f16_is_nan(std::uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }
inline bool bf16_is_nan(std::uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f); }

inline std::uint32_t bits_of(float f) { return std::bit_cast<std::uint32_t>(f); }
inline float float_of(std::uint32_t u) { return std::bit_cast<float>(u); }


// ---- generic per-dtype helpers for the kernel tests -----------------------------------------

template <class S, class A, DType DT>
struct Tag {
  using Storage = S;
  using Acc = A;  // f16/bf16 accumulate in float
  static constexpr DType dtype = DT;
};
using F16T = Tag<std::uint16_t, float, DType::f16>;
using BF16T = Tag<std::uint16_t, float, DType::bf16>;
using F32T = Tag<float, float, DType::f32>;
using F64T = Tag<double, double, DType::f64>;
using I8T = Tag<std::int8_t, std::int8_t, DType::i8>;
using U8T = Tag<std::uint8_t, std::uint8_t, DType::u8>;
using I32T = Tag<std::int32_t, std::int32_t, DType::i32>;
using I64T = Tag<std::int64_t, std::int64_t, DType::i64>;

template <class F>
inline void visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f16: return f(F16T{});
    case DType::bf16: return f(BF16T{});
    case DType::f32: return f(F32T{});
    case DType::f64: return f(F64T{});
    case DType::i8: return f(I8T{});
    case DType::u8: return f(U8T{});
    case DType::i32: return f(I32T{});
    case DType::i64: return f(I64T{});
  }
  FAIL() << "unknown dtype";
}

template <class T>
typename T::Acc to_acc(typename T::Storage s) {
  if constexpr (T::dtype == DType::f16) return f16_to_f32(s);
  else if constexpr (T::dtype == DType::bf16) return bf16_to_f32(s);
  else return s;
}
template <class T>
typename T::Storage from_acc(typename T::Acc a) {
  if constexpr (T::dtype == DType::f16) return f32_to_f16(a);
  else if constexpr (T::dtype == DType::bf16) return f32_to_bf16(a);
  else return a;
}

// Straightforward scalar reference of one combine step, written independently of the kernels:
// integers wrap via 64-bit unsigned arithmetic, float min/max propagate NaN.
template <class A>
A ref_combine(ReduceOp op, A x, A y) {
  if constexpr (std::is_floating_point_v<A>) {
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg: return x + y;
      case ReduceOp::prod: return x * y;
      case ReduceOp::min:
        return (std::isnan(x) || std::isnan(y)) ? std::numeric_limits<A>::quiet_NaN()
                                                : std::min(x, y);
      case ReduceOp::max:
        return (std::isnan(x) || std::isnan(y)) ? std::numeric_limits<A>::quiet_NaN()
                                                : std::max(x, y);
      default: ADD_FAILURE() << "bitwise op on float"; return x;
    }
  } else {
    const auto ux = static_cast<std::uint64_t>(x), uy = static_cast<std::uint64_t>(y);
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg: return static_cast<A>(ux + uy);
      case ReduceOp::prod: return static_cast<A>(ux * uy);
      case ReduceOp::min: return std::min(x, y);
      case ReduceOp::max: return std::max(x, y);
      case ReduceOp::band: return static_cast<A>(ux & uy);
      case ReduceOp::bor: return static_cast<A>(ux | uy);
      case ReduceOp::bxor: return static_cast<A>(ux ^ uy);
    }
    return x;
  }
}

// Equality for results: floats by value (NaN == NaN, +0 == -0), others exactly.
template <class T>
inline bool same(typename T::Storage got, typename T::Storage want) {
  if constexpr (std::is_floating_point_v<typename T::Acc>) {
    const auto g = to_acc<T>(got), w = to_acc<T>(want);
    return (std::isnan(g) && std::isnan(w)) || g == w;
  } else {
    return got == want;
  }
}

template <class T>
inline std::string show(typename T::Storage v) {
  if constexpr (std::is_floating_point_v<typename T::Acc>) return std::to_string(to_acc<T>(v));
  else return std::to_string(static_cast<long long>(v));
}

// Random data: floats in [-3, 3] (products of 5 stay finite in f16) with some exact duplicates
// and zeros (ties for min/max) and a few NaN, +-inf and -0; integers over their whole range
// (exercises wrap-around).
template <class T>
std::vector<typename T::Storage> random_data(std::size_t n, std::mt19937_64& rng) {
  using S = typename T::Storage;
  std::vector<S> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (std::is_floating_point_v<typename T::Acc>) {
      double x = std::uniform_real_distribution<double>(-3.0, 3.0)(rng);
      const auto r = rng() % 128;
      if (r < 8) x = static_cast<double>(r % 3) - 1.0;
      else if (r == 8) x = std::numeric_limits<double>::quiet_NaN();
      else if (r == 9) x = INFINITY;
      else if (r == 10) x = -INFINITY;
      else if (r == 11) x = -0.0;
      v[i] = from_acc<T>(static_cast<typename T::Acc>(x));
    } else {
      v[i] = static_cast<S>(rng());
    }
  }
  return v;
}

inline bool is_valid(DType t, ReduceOp op) { return reduce_op_valid(t, op); }

// Odd tails; 4099 also crosses the 4096-element reduce_n block and the 512-element F16C stage.
inline constexpr std::size_t kSizes[] = {0, 1, 3, 17, 1000, 4099};

inline std::string isa_name(KernelIsa isa) {
  return isa == KernelIsa::portable ? "portable" : "avx2_f16c";
}
inline constexpr KernelIsa kAllIsas[] = {KernelIsa::portable, KernelIsa::avx2_f16c};

// Runs the test body on one kernel implementation (skipped where the CPU lacks it) and restores
// the automatically selected one afterwards.
class IsaScope {
 public:
  explicit IsaScope(KernelIsa isa) : saved_(kernel_isa()) { ok_ = set_kernel_isa(isa); }
  ~IsaScope() { set_kernel_isa(saved_); }
  bool ok() const { return ok_; }

 private:
  KernelIsa saved_;
  bool ok_ = false;
};


} // namespace chorus::testing
