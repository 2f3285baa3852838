// The AVX2 + F16C kernel table (x86-64, chosen at run time when the CPU has both; see
// reduce_kernels.cpp for the design and the dispatch). Integer, f32 and f64 kernels are the generic
// loops of reduce_kernel_loops.hpp compiled for AVX2; f16 and bf16 are written with intrinsics,
// 8 elements at a time, in the same loop structure and fold order as the portable code, so both
// tables give the same results bit for bit.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "strategies/reduce_kernel_loops.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CHORUS_KERNELS_X86_AVX2 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define CHORUS_KERNELS_X86_AVX2 0
#endif

namespace chorus::kernels {

#if CHORUS_KERNELS_X86_AVX2
#define CHORUS_AVX2 [[gnu::target("avx2,f16c")]]

namespace {

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

constexpr KernelTable kAvx2Table = make_table<Avx2>();

} // namespace

const KernelTable* avx2_table() { return &kAvx2Table; }

bool cpu_has_avx2_f16c() {
  // __builtin_cpu_supports("avx2") also checks that the OS saves the YMM state; F16C is read from
  // CPUID directly (leaf 1, ECX bit 29) since not every compiler accepts "f16c" there.
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2")) return false;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#else
const KernelTable* avx2_table() { return nullptr; }
bool cpu_has_avx2_f16c() { return false; }
#endif

} // namespace chorus::kernels
