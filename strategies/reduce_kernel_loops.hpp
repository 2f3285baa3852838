// The pieces every reduction kernel is built from: element traits (storage type, accumulation
// type, conversions), the ops, the loop bodies, and the [dtype][op] table the public entry points
// dispatch through. Included by the two files that instantiate the loops for an instruction set:
// reduce_kernels.cpp (portable) and reduce_kernels_avx2.cpp (AVX2 + F16C); the design of the
// kernels is written at the top of reduce_kernels.cpp.
//
// Everything here is a template or constexpr, always inlined into the per-ISA entry points, so
// each ISA compiles the loops for its own target. Both files are compiled with -O3
// (strategies/CMakeLists.txt): g++ vectorizes these loops only at that level.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include <chorus/types.hpp>

#include "strategies/half_float.hpp"

#if defined(__GNUC__) || defined(__clang__)
#define CHORUS_ALWAYS_INLINE [[gnu::always_inline]] inline
#else
#define CHORUS_ALWAYS_INLINE inline
#endif

namespace chorus::kernels {

// ---- element traits: storage type, accumulation type and conversions ------------------------

template <class S, class A = S>
struct Native {
  using Storage = S;
  using Acc = A;
  static Acc load(S v) { return v; }
  static S store(Acc v) { return v; }
};

struct F16 {
  using Storage = std::uint16_t;
  using Acc = float;
  static float load(std::uint16_t v) { return half::f16_to_f32(v); }
  static std::uint16_t store(float v) { return half::f32_to_f16(v); }
};

struct BF16 {
  using Storage = std::uint16_t;
  using Acc = float;
  static float load(std::uint16_t v) { return half::bf16_to_f32(v); }
  static std::uint16_t store(float v) { return half::f32_to_bf16(v); }
};

// Tables are indexed like DType and ReduceOp.
static_assert(static_cast<int>(DType::f16) == 0 && static_cast<int>(DType::bf16) == 1 &&
              static_cast<int>(DType::f32) == 2 && static_cast<int>(DType::f64) == 3 &&
              static_cast<int>(DType::i8) == 4 && static_cast<int>(DType::u8) == 5 &&
              static_cast<int>(DType::i32) == 6 && static_cast<int>(DType::i64) == 7);
static_assert(static_cast<int>(ReduceOp::sum) == 0 && static_cast<int>(ReduceOp::prod) == 1 &&
              static_cast<int>(ReduceOp::min) == 2 && static_cast<int>(ReduceOp::max) == 3 &&
              static_cast<int>(ReduceOp::avg) == 4 && static_cast<int>(ReduceOp::band) == 5 &&
              static_cast<int>(ReduceOp::bor) == 6 && static_cast<int>(ReduceOp::bxor) == 7);
constexpr std::size_t kNumDTypes = 8;
constexpr std::size_t kNumOps = 8;

// ---- the ops -------------------------------------------------------------------------------

template <ReduceOp Op>
constexpr bool is_bitwise = Op == ReduceOp::band || Op == ReduceOp::bor || Op == ReduceOp::bxor;

template <class E, ReduceOp Op>
constexpr bool valid_combo = !(is_bitwise<Op> && std::is_floating_point_v<typename E::Acc>);

// Unsigned arithmetic type at least as wide as unsigned int, so that u8*u8 etc. never promote
// to a signed int that could overflow.
template <class T>
using wrap_t = std::common_type_t<std::make_unsigned_t<T>, unsigned int>;

template <ReduceOp Op, class A>
inline A combine(A x, A y) {
  if constexpr (Op == ReduceOp::sum || Op == ReduceOp::avg) {
    if constexpr (std::is_integral_v<A>)
      return static_cast<A>(static_cast<wrap_t<A>>(x) + static_cast<wrap_t<A>>(y));
    else
      return x + y;
  } else if constexpr (Op == ReduceOp::prod) {
    if constexpr (std::is_integral_v<A>)
      return static_cast<A>(static_cast<wrap_t<A>>(x) * static_cast<wrap_t<A>>(y));
    else
      return x * y;
  } else if constexpr (Op == ReduceOp::min) {
    if constexpr (std::is_floating_point_v<A>)
      return ((x < y) | (x != x)) ? x : y;  // NaN in x -> x; NaN in y -> y
    else
      return x < y ? x : y;
  } else if constexpr (Op == ReduceOp::max) {
    if constexpr (std::is_floating_point_v<A>)
      return ((x > y) | (x != x)) ? x : y;
    else
      return x > y ? x : y;
  } else if constexpr (Op == ReduceOp::band) {
    return static_cast<A>(x & y);
  } else if constexpr (Op == ReduceOp::bor) {
    return static_cast<A>(x | y);
  } else {
    static_assert(Op == ReduceOp::bxor);
    return static_cast<A>(x ^ y);
  }
}

// ---- loop bodies ---------------------------------------------------------------------------
// Always inlined into the per-ISA entry points below, so each ISA compiles them for its target.

// Elements per reduce_n block (more than kFanIn sources). The accumulator block lives on the
// stack (at most 32 KiB, for f64/i64) and stays in L1/L2 while the sources stream through.
constexpr std::size_t kBlock = 4096;
// Sources combined per pass of reduce_n.
constexpr std::size_t kFanIn = 4;

template <class E, ReduceOp Op>
CHORUS_ALWAYS_INLINE void reduce2_loop(void* dst, const void* a, const void* b, std::size_t count) {
  using S = typename E::Storage;
  S* d = static_cast<S*>(dst);
  const S* x = static_cast<const S*>(a);
  const S* y = static_cast<const S*>(b);
  for (std::size_t i = 0; i < count; ++i)
    d[i] = E::store(combine<Op>(E::load(x[i]), E::load(y[i])));
}

// Left fold of K sources (fold) or of the accumulator and K sources (fold_acc) at element i.
template <class E, ReduceOp Op, std::size_t... Ks>
CHORUS_ALWAYS_INLINE typename E::Acc fold(const typename E::Storage* const* q, std::size_t i,
                                          std::index_sequence<0, Ks...>) {
  typename E::Acc v = E::load(q[0][i]);
  ((v = combine<Op>(v, E::load(q[Ks][i]))), ...);
  return v;
}
template <class E, ReduceOp Op, std::size_t... Ks>
CHORUS_ALWAYS_INLINE typename E::Acc fold_acc(typename E::Acc v,
                                              const typename E::Storage* const* q, std::size_t i,
                                              std::index_sequence<Ks...>) {
  ((v = combine<Op>(v, E::load(q[Ks][i]))), ...);
  return v;
}

// The passes of reduce_n over elements [off, off + len) of the K >= 1 sources q[0..K); `out` and
// `acc` point at the first element of the range. Each pass is one loop reading all its sources at
// once (several concurrent streams keep the memory system busy).
template <class E, ReduceOp Op, std::size_t K>
CHORUS_ALWAYS_INLINE void pass_only(typename E::Storage* out, const void* const* q, std::size_t off,
                                    std::size_t len) {
  const typename E::Storage* p[K];
  for (std::size_t k = 0; k < K; ++k) p[k] = static_cast<const typename E::Storage*>(q[k]) + off;
  for (std::size_t i = 0; i < len; ++i)
    out[i] = E::store(fold<E, Op>(p, i, std::make_index_sequence<K>{}));
}
template <class E, ReduceOp Op, std::size_t K>
CHORUS_ALWAYS_INLINE void pass_first(typename E::Acc* acc, const void* const* q, std::size_t off,
                                     std::size_t len) {
  const typename E::Storage* p[K];
  for (std::size_t k = 0; k < K; ++k) p[k] = static_cast<const typename E::Storage*>(q[k]) + off;
  for (std::size_t i = 0; i < len; ++i) acc[i] = fold<E, Op>(p, i, std::make_index_sequence<K>{});
}
template <class E, ReduceOp Op, std::size_t K>
CHORUS_ALWAYS_INLINE void pass_mid(typename E::Acc* acc, const void* const* q, std::size_t off,
                                   std::size_t len) {
  const typename E::Storage* p[K];
  for (std::size_t k = 0; k < K; ++k) p[k] = static_cast<const typename E::Storage*>(q[k]) + off;
  for (std::size_t i = 0; i < len; ++i)
    acc[i] = fold_acc<E, Op>(acc[i], p, i, std::make_index_sequence<K>{});
}
template <class E, ReduceOp Op, std::size_t K>
CHORUS_ALWAYS_INLINE void pass_last(typename E::Storage* out, const typename E::Acc* acc,
                                    const void* const* q, std::size_t off, std::size_t len) {
  const typename E::Storage* p[K];
  for (std::size_t k = 0; k < K; ++k) p[k] = static_cast<const typename E::Storage*>(q[k]) + off;
  for (std::size_t i = 0; i < len; ++i)
    out[i] = E::store(fold_acc<E, Op>(acc[i], p, i, std::make_index_sequence<K>{}));
}

// nsrc >= 2 (nsrc == 1 is a copy, handled by the caller).
template <class E, ReduceOp Op>
CHORUS_ALWAYS_INLINE void reduce_n_loop(void* dst, const void* const* srcs, std::size_t nsrc,
                                        std::size_t count) {
  using S = typename E::Storage;
  using A = typename E::Acc;
  S* d = static_cast<S*>(dst);
  if (nsrc <= kFanIn) {
    // One fused pass: each source and dst streamed once, no intermediate buffer.
    switch (nsrc) {
      case 2: return pass_only<E, Op, 2>(d, srcs, 0, count);
      case 3: return pass_only<E, Op, 3>(d, srcs, 0, count);
      default: return pass_only<E, Op, 4>(d, srcs, 0, count);
    }
  }
  alignas(64) A acc[kBlock];
  for (std::size_t start = 0; start < count; start += kBlock) {
    const std::size_t len = count - start < kBlock ? count - start : kBlock;
    pass_first<E, Op, kFanIn>(acc, srcs, start, len);
    std::size_t k = kFanIn;
    for (; nsrc - k > kFanIn; k += kFanIn) pass_mid<E, Op, kFanIn>(acc, srcs + k, start, len);
    switch (nsrc - k) {  // 1..kFanIn sources left
      case 1: pass_last<E, Op, 1>(d + start, acc, srcs + k, start, len); break;
      case 2: pass_last<E, Op, 2>(d + start, acc, srcs + k, start, len); break;
      case 3: pass_last<E, Op, 3>(d + start, acc, srcs + k, start, len); break;
      default: pass_last<E, Op, 4>(d + start, acc, srcs + k, start, len); break;
    }
  }
}

template <class E>
CHORUS_ALWAYS_INLINE void divide_loop(void* dst, std::size_t count, std::size_t divisor) {
  using S = typename E::Storage;
  using A = typename E::Acc;
  S* d = static_cast<S*>(dst);
  if constexpr (std::is_floating_point_v<A>) {
    if (divisor <= (std::size_t{1} << std::numeric_limits<A>::digits)) {
      // The divisor is exact in A: one correctly rounded division (f16/bf16: then rounded to the
      // storage type; f32 has enough extra precision for that double rounding to be innocuous).
      const A div = static_cast<A>(divisor);
      for (std::size_t i = 0; i < count; ++i) d[i] = E::store(E::load(d[i]) / div);
    } else {
      // Huge divisor (> 2^24 for f32-based types): divide in double, as exactly as double allows.
      const double div = static_cast<double>(divisor);
      for (std::size_t i = 0; i < count; ++i)
        d[i] = E::store(static_cast<A>(static_cast<double>(E::load(d[i])) / div));
    }
  } else if constexpr (sizeof(A) <= 4) {
    // |x| <= 2^32 and divisor < 2^53 (or the quotient is < 1 anyway): double division followed by
    // truncation is exactly C++'s truncating integer division, and it vectorizes. divisor >= 2
    // here, so the quotient fits in int32 even for 32-bit unsigned values.
    const double div = static_cast<double>(divisor);
    for (std::size_t i = 0; i < count; ++i)
      d[i] = static_cast<A>(static_cast<std::int32_t>(static_cast<double>(d[i]) / div));
  } else if constexpr (std::is_signed_v<A>) {
    // Divide magnitudes in u64 (|INT64_MIN| fits), then restore the sign: truncation toward zero
    // for any divisor, including divisors above INT64_MAX.
    const std::uint64_t div = divisor;
    for (std::size_t i = 0; i < count; ++i) {
      const A v = d[i];
      const std::uint64_t mag =
          v < 0 ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
      const std::uint64_t q = mag / div;
      d[i] = static_cast<A>(v < 0 ? 0 - q : q);
    }
  } else {
    const std::uint64_t div = divisor;
    for (std::size_t i = 0; i < count; ++i) d[i] = static_cast<A>(d[i] / div);
  }
}

// ---- dispatch tables -----------------------------------------------------------------------

using Reduce2Fn = void (*)(void*, const void*, const void*, std::size_t);
using ReduceNFn = void (*)(void*, const void* const*, std::size_t, std::size_t);
using DivideFn = void (*)(void*, std::size_t, std::size_t);

struct KernelTable {
  std::array<std::array<Reduce2Fn, kNumOps>, kNumDTypes> reduce2;
  std::array<std::array<ReduceNFn, kNumOps>, kNumDTypes> reduce_n;
  std::array<DivideFn, kNumDTypes> divide;
};

// Element types in DType order.
template <class F>
constexpr auto per_dtype(F f) {
  return std::array{f(F16{}),
                    f(BF16{}),
                    f(Native<float>{}),
                    f(Native<double>{}),
                    f(Native<std::int8_t>{}),
                    f(Native<std::uint8_t>{}),
                    f(Native<std::int32_t>{}),
                    f(Native<std::int64_t>{})};
}
// Ops in ReduceOp order.
template <class F>
constexpr auto per_op(F f) {
  using enum ReduceOp;
  return std::array{f.template operator()<sum>(),  f.template operator()<prod>(),
                    f.template operator()<min>(),  f.template operator()<max>(),
                    f.template operator()<avg>(),  f.template operator()<band>(),
                    f.template operator()<bor>(),  f.template operator()<bxor>()};
}

// Builds a table from an ISA's entry points Isa::reduce2<E, Op>, Isa::reduce_n<E, Op> and
// Isa::divide<E>; invalid (dtype, op) combinations get nullptr.
template <class Isa>
constexpr KernelTable make_table() {
  KernelTable t{};
  t.reduce2 = per_dtype([](auto e) {
    using E = decltype(e);
    return per_op([]<ReduceOp Op>() -> Reduce2Fn {
      if constexpr (valid_combo<E, Op>) return &Isa::template reduce2<E, Op>;
      else return nullptr;
    });
  });
  t.reduce_n = per_dtype([](auto e) {
    using E = decltype(e);
    return per_op([]<ReduceOp Op>() -> ReduceNFn {
      if constexpr (valid_combo<E, Op>) return &Isa::template reduce_n<E, Op>;
      else return nullptr;
    });
  });
  t.divide = per_dtype([](auto e) -> DivideFn { return &Isa::template divide<decltype(e)>; });
  return t;
}

// The two instruction sets' tables (constant-initialized, so kernels called from other static
// initializers work too). avx2_table() is nullptr where the build has no AVX2 kernels; whether the
// CPU can run them is cpu_has_avx2_f16c().
extern const KernelTable portable_table;
const KernelTable* avx2_table();
bool cpu_has_avx2_f16c();

} // namespace chorus::kernels
