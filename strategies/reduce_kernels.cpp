// Host-memory reduction kernels.
//
// Design:
//  * One loop per (dtype, op), generated from templates with the element conversion and the op
//    inlined; the public entry points pick it from a compile-time table indexed [dtype][op]
//    (one indirect call per call, never a per-element switch). The loops are plain indexed loops
//    over possibly aliasing arrays (no __restrict: dst may alias a source), which g++ -O3
//    vectorizes behind its runtime overlap check (dst == a source passes that check).
//  * Two tables: the portable one (whatever the build targets, SSE2 on plain x86-64) and, on
//    x86-64, one whose loops are compiled for AVX2 and whose f16/bf16 kernels are written with
//    intrinsics (8 elements at a time; f16 converts with F16C vcvtph2ps / vcvtps2ph, bf16 with
//    AVX2 integer ops; same loop structure as the portable code). The AVX2 table is used when
//    the CPU has AVX2 and F16C (checked once, on first use). Both produce the same results bit
//    for bit (the same IEEE f32/f64 operations in the same order; F16C rounds to nearest even and
//    quiets NaNs like the portable code), except which NaN payload wins when several operands are
//    NaN (the compiler may commute operands). Tests run everything on both (set_kernel_isa in
//    half_float.hpp).
//  * f16/bf16 are widened to f32 (exact), combined in f32 and rounded to nearest even once per
//    output element (see half_float.hpp). For reduce2 this is the correctly rounded result for
//    sum and prod (f32 carries enough precision that the double rounding is innocuous; prod of two
//    halves is even exact in f32).
//  * reduce_n folds left to right, ((s0 op s1) op s2) ..., in f32 for f16/bf16 (rounded once at
//    the end). Up to kFanIn (4) sources: one fused loop reading all sources at once. More: block by
//    block (kBlock elements), folding 4 sources per pass into an accumulator block on the stack
//    (L1/L2 resident) and combining the last group on the way out into dst. Either way every source
//    is read once and dst written once. Since dst is only written after every source has been read
//    for that element / block, dst may be identical to any source (not just srcs[0]); partial
//    overlaps (shifted pointers) are not supported.
//  * Integers: sum/prod (and avg) are computed in the unsigned type, so they wrap modulo 2^bits,
//    also for signed types (no UB). min/max compare as the signed/unsigned type.
//  * Floats min/max propagate NaN: if either operand is NaN the result is NaN (like torch.minimum /
//    torch.maximum). Ties, including -0 vs +0, return the second operand.
//  * Invalid combinations (bitwise op on a float dtype, out-of-range enum values) are a no-op:
//    dst is left untouched. Callers must check reduce_op_valid first; the kernels just do not
//    crash or scribble when they forget. count == 0 and nsrc == 0 are no-ops too.
//  * divide_by: floats divide, correctly rounded (f16/bf16 via f32: the f32 quotient is rounded
//    once more to the storage type, which f32's extra precision makes innocuous; divisors above
//    2^24 (f32-based) or 2^53 (f64) are converted to double/f64 first), integers divide truncating
//    toward zero (like C++ `/`). divisor == 0 is a no-op (integer division by zero is undefined,
//    avg over zero peers meaningless); divisor == 1 is a no-op too.
//  * Assumes the default floating-point environment (round to nearest) and no -ffast-math
//    (-ffinite-math-only would break the NaN handling of min/max).
#include "strategies/reduce_kernels.hpp"

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "strategies/half_float.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CHORUS_KERNELS_X86_AVX2 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define CHORUS_KERNELS_X86_AVX2 0
#endif

#if defined(__GNUC__) || defined(__clang__)
#define CHORUS_ALWAYS_INLINE [[gnu::always_inline]] inline
#else
#define CHORUS_ALWAYS_INLINE inline
#endif

namespace chorus {

namespace {

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

// ---- portable implementation ---------------------------------------------------------------

struct Portable {
  template <class E, ReduceOp Op>
  static void reduce2(void* dst, const void* a, const void* b, std::size_t count) {
    reduce2_loop<E, Op>(dst, a, b, count);
  }
  template <class E, ReduceOp Op>
  static void reduce_n(void* dst, const void* const* srcs, std::size_t nsrc, std::size_t count) {
    reduce_n_loop<E, Op>(dst, srcs, nsrc, count);
  }
  template <class E>
  static void divide(void* dst, std::size_t count, std::size_t divisor) {
    divide_loop<E>(dst, count, divisor);
  }
};

constexpr KernelTable portable_table = make_table<Portable>();

// ---- AVX2 + F16C implementation (x86-64, selected at run time) ------------------------------

#if CHORUS_KERNELS_X86_AVX2
#define CHORUS_AVX2 [[gnu::target("avx2,f16c")]]

namespace simd {

// 8 (or 1) f16/bf16 <-> f32: exact widening; narrowing rounds to nearest even and quiets NaNs,
// exactly like the portable conversions in half_float.hpp.
struct F16Cvt {  // F16C instructions
  CHORUS_AVX2 static __m256 load8(const std::uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  CHORUS_AVX2 static void store8(std::uint16_t* p, __m256 v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  CHORUS_AVX2 static float load1(std::uint16_t h) { return _cvtsh_ss(h); }
  CHORUS_AVX2 static std::uint16_t store1(float f) {
    return static_cast<std::uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
  }
};

struct BF16Cvt {  // AVX2 integer ops, the same bit manipulation as half::f32_to_bf16
  CHORUS_AVX2 static __m256 load8(const std::uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  CHORUS_AVX2 static void store8(std::uint16_t* p, __m256 v) {
    const __m256i x = _mm256_castps_si256(v);
    const __m256i hi = _mm256_srli_epi32(x, 16);
    const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256i qnan = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m256i r = _mm256_blendv_epi8(rounded, qnan, nan);  // 8 x u32, each <= 0xffff
    // Pack to u16 (per 128-bit lane), then gather the two lanes' low halves.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
  CHORUS_AVX2 static float load1(std::uint16_t h) { return half::bf16_to_f32(h); }
  CHORUS_AVX2 static std::uint16_t store1(float f) { return half::f32_to_bf16(f); }
};

// combine<Op> on 8 floats, with the same semantics (min/max: x if x < y (x > y) or x is NaN).
template <ReduceOp Op>
CHORUS_AVX2 inline __m256 vcombine(__m256 x, __m256 y) {
  if constexpr (Op == ReduceOp::sum || Op == ReduceOp::avg) {
    return _mm256_add_ps(x, y);
  } else if constexpr (Op == ReduceOp::prod) {
    return _mm256_mul_ps(x, y);
  } else {
    static_assert(Op == ReduceOp::min || Op == ReduceOp::max);
    const __m256 lt_or_gt = Op == ReduceOp::min ? _mm256_cmp_ps(x, y, _CMP_LT_OQ)
                                                : _mm256_cmp_ps(x, y, _CMP_GT_OQ);
    const __m256 take_x = _mm256_or_ps(lt_or_gt, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    return _mm256_blendv_ps(y, x, take_x);
  }
}

// One pass over elements [off, off + len) of K f16/bf16 sources q[0..K), optionally starting from
// the f32 accumulator block (FromAcc), writing either f16/bf16 to out (ToOut) or f32 back to acc.
// Same left-fold order as the portable passes. Every chunk of 8 is read before it is written.
template <class Cvt, ReduceOp Op, std::size_t K, bool FromAcc, bool ToOut>
CHORUS_AVX2 void pass(std::uint16_t* out, float* acc, const void* const* q, std::size_t off,
                      std::size_t len) {
  const std::uint16_t* p[K];
  for (std::size_t k = 0; k < K; ++k) p[k] = static_cast<const std::uint16_t*>(q[k]) + off;
  constexpr std::size_t k0 = FromAcc ? 0 : 1;
  std::size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    __m256 v = FromAcc ? _mm256_loadu_ps(acc + i) : Cvt::load8(p[0] + i);
    for (std::size_t k = k0; k < K; ++k) v = vcombine<Op>(v, Cvt::load8(p[k] + i));
    if constexpr (ToOut) Cvt::store8(out + i, v);
    else _mm256_storeu_ps(acc + i, v);
  }
  for (; i < len; ++i) {
    float v = FromAcc ? acc[i] : Cvt::load1(p[0][i]);
    for (std::size_t k = k0; k < K; ++k) v = combine<Op>(v, Cvt::load1(p[k][i]));
    if constexpr (ToOut) out[i] = Cvt::store1(v);
    else acc[i] = v;
  }
}

template <class Cvt, ReduceOp Op>
CHORUS_AVX2 void reduce2(void* dst, const void* a, const void* b, std::size_t count) {
  const void* q[2] = {a, b};
  pass<Cvt, Op, 2, false, true>(static_cast<std::uint16_t*>(dst), nullptr, q, 0, count);
}

// Same structure as reduce_n_loop.
template <class Cvt, ReduceOp Op>
CHORUS_AVX2 void reduce_n(void* dst, const void* const* srcs, std::size_t nsrc, std::size_t count) {
  auto* d = static_cast<std::uint16_t*>(dst);
  if (nsrc <= kFanIn) {
    switch (nsrc) {
      case 2: return pass<Cvt, Op, 2, false, true>(d, nullptr, srcs, 0, count);
      case 3: return pass<Cvt, Op, 3, false, true>(d, nullptr, srcs, 0, count);
      default: return pass<Cvt, Op, 4, false, true>(d, nullptr, srcs, 0, count);
    }
  }
  alignas(32) float acc[kBlock];
  for (std::size_t start = 0; start < count; start += kBlock) {
    const std::size_t len = count - start < kBlock ? count - start : kBlock;
    pass<Cvt, Op, kFanIn, false, false>(nullptr, acc, srcs, start, len);
    std::size_t k = kFanIn;
    for (; nsrc - k > kFanIn; k += kFanIn)
      pass<Cvt, Op, kFanIn, true, false>(nullptr, acc, srcs + k, start, len);
    switch (nsrc - k) {  // 1..kFanIn sources left
      case 1: pass<Cvt, Op, 1, true, true>(d + start, acc, srcs + k, start, len); break;
      case 2: pass<Cvt, Op, 2, true, true>(d + start, acc, srcs + k, start, len); break;
      case 3: pass<Cvt, Op, 3, true, true>(d + start, acc, srcs + k, start, len); break;
      default: pass<Cvt, Op, 4, true, true>(d + start, acc, srcs + k, start, len); break;
    }
  }
}

template <class Cvt, class E>
CHORUS_AVX2 void divide(void* dst, std::size_t count, std::size_t divisor) {
  if (divisor > (std::size_t{1} << 24)) return divide_loop<E>(dst, count, divisor);
  auto* d = static_cast<std::uint16_t*>(dst);
  const float div = static_cast<float>(divisor);
  const __m256 vdiv = _mm256_set1_ps(div);
  std::size_t i = 0;
  for (; i + 8 <= count; i += 8) Cvt::store8(d + i, _mm256_div_ps(Cvt::load8(d + i), vdiv));
  for (; i < count; ++i) d[i] = Cvt::store1(Cvt::load1(d[i]) / div);
}

} // namespace simd

// f16 and bf16 use the intrinsic loops above; other types the generic loops compiled for AVX2.
template <class E> struct HalfCvt { using type = void; };
template <> struct HalfCvt<F16> { using type = simd::F16Cvt; };
template <> struct HalfCvt<BF16> { using type = simd::BF16Cvt; };

struct Avx2 {
  template <class E, ReduceOp Op>
  CHORUS_AVX2 static void reduce2(void* dst, const void* a, const void* b, std::size_t count) {
    using Cvt = typename HalfCvt<E>::type;
    if constexpr (!std::is_void_v<Cvt>) simd::reduce2<Cvt, Op>(dst, a, b, count);
    else reduce2_loop<E, Op>(dst, a, b, count);
  }
  template <class E, ReduceOp Op>
  CHORUS_AVX2 static void reduce_n(void* dst, const void* const* srcs, std::size_t nsrc,
                                   std::size_t count) {
    using Cvt = typename HalfCvt<E>::type;
    if constexpr (!std::is_void_v<Cvt>) simd::reduce_n<Cvt, Op>(dst, srcs, nsrc, count);
    else reduce_n_loop<E, Op>(dst, srcs, nsrc, count);
  }
  template <class E>
  CHORUS_AVX2 static void divide(void* dst, std::size_t count, std::size_t divisor) {
    using Cvt = typename HalfCvt<E>::type;
    if constexpr (!std::is_void_v<Cvt>) simd::divide<Cvt, E>(dst, count, divisor);
    else divide_loop<E>(dst, count, divisor);
  }
};

constexpr KernelTable avx2_table = make_table<Avx2>();

bool cpu_has_avx2_f16c() {
  // __builtin_cpu_supports("avx2") also checks that the OS saves the YMM state; F16C is read from
  // CPUID directly (leaf 1, ECX bit 29) since not every compiler accepts "f16c" there.
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2")) return false;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#else
bool cpu_has_avx2_f16c() { return false; }
#endif

// The active table; nullptr until first use (constant-initialized, so kernels called from other
// static initializers work too).
std::atomic<const KernelTable*> g_active{nullptr};

const KernelTable* table_for(KernelIsa isa) {
#if CHORUS_KERNELS_X86_AVX2
  if (isa == KernelIsa::avx2_f16c) return &avx2_table;
#endif
  (void)isa;
  return &portable_table;
}

const KernelTable& active_table() {
  const KernelTable* t = g_active.load(std::memory_order_relaxed);
  if (t == nullptr) [[unlikely]] {
    // Benign race: every thread computes the same answer.
    t = table_for(cpu_has_avx2_f16c() ? KernelIsa::avx2_f16c : KernelIsa::portable);
    g_active.store(t, std::memory_order_relaxed);
  }
  return *t;
}

constexpr bool in_range(DType t, ReduceOp op) {
  return static_cast<std::size_t>(t) < kNumDTypes && static_cast<std::size_t>(op) < kNumOps;
}

} // namespace

bool kernel_isa_supported(KernelIsa isa) {
  return isa == KernelIsa::portable || (isa == KernelIsa::avx2_f16c && cpu_has_avx2_f16c());
}

KernelIsa kernel_isa() {
  return &active_table() == &portable_table ? KernelIsa::portable : KernelIsa::avx2_f16c;
}

bool set_kernel_isa(KernelIsa isa) {
  if (!kernel_isa_supported(isa)) return false;
  g_active.store(table_for(isa), std::memory_order_relaxed);
  return true;
}

void reduce2(DType t, ReduceOp op, void* dst, const void* a, const void* b, std::size_t count) {
  if (count == 0 || !in_range(t, op)) return;
  const auto& table = active_table();
  if (Reduce2Fn fn = table.reduce2[static_cast<std::size_t>(t)][static_cast<std::size_t>(op)])
    fn(dst, a, b, count);
}

void reduce_n(DType t, ReduceOp op, void* dst, const void* const* srcs, std::size_t nsrc,
              std::size_t count) {
  if (count == 0 || nsrc == 0 || !in_range(t, op)) return;
  const auto& table = active_table();
  ReduceNFn fn = table.reduce_n[static_cast<std::size_t>(t)][static_cast<std::size_t>(op)];
  if (fn == nullptr) return;
  if (nsrc == 1) {
    // A single source reduces to itself; copying the bits is exact for every dtype.
    if (dst != srcs[0]) std::memmove(dst, srcs[0], count * dtype_size(t));
    return;
  }
  fn(dst, srcs, nsrc, count);
}

void divide_by(DType t, void* dst, std::size_t count, std::size_t divisor) {
  if (count == 0 || divisor <= 1 || static_cast<std::size_t>(t) >= kNumDTypes) return;
  active_table().divide[static_cast<std::size_t>(t)](dst, count, divisor);
}

float f16_to_f32(unsigned short h) { return half::f16_to_f32(h); }
unsigned short f32_to_f16(float f) { return half::f32_to_f16(f); }
float bf16_to_f32(unsigned short h) { return half::bf16_to_f32(h); }
unsigned short f32_to_bf16(float f) { return half::f32_to_bf16(f); }

} // namespace chorus
