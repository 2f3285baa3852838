// Branchless, integer/bit-manipulation conversions between IEEE binary16 (f16), bfloat16 (bf16)
// and binary32 (f32). Header-only and inline so the reduction kernels can inline them into their
// loops and g++ -O3 vectorizes them (every branch is a select, no table lookups).
//
// Guarantees (all dtypes):
//   * widening (f16/bf16 -> f32) is exact for every bit pattern: normals, subnormals, +-0, +-inf;
//     a NaN stays a NaN with its sign and payload (a signalling NaN stays signalling);
//   * narrowing (f32 -> f16/bf16) rounds to nearest, ties to even, correctly for every input:
//     values too large overflow to +-inf (f16: |x| >= 65520), tiny values become subnormals or +-0,
//     +-inf stays +-inf, and a NaN becomes a quiet NaN with the same sign and the top payload bits.
// They assume the default floating-point environment (round to nearest); flush-to-zero or
// denormals-are-zero modes do not change any result (the only f32 arithmetic used, in the f16
// subnormal paths, has normal operands and results, or inputs that round to 0 anyway).
#pragma once
#include <bit>
#include <cstdint>

namespace chorus::half {

// Branch-free select: cond ? a : b. Written with masks rather than ?: so that g++ does not sink
// the f32 arithmetic feeding `a` into a branch, which (under the default -ftrapping-math) it
// would then refuse to if-convert, and the kernels' loops would not vectorize. The comparisons
// feeding it are done on int32 (all operands are < 2^31): SSE2 only has signed compares.
inline std::uint32_t select(bool cond, std::uint32_t a, std::uint32_t b) noexcept {
  const std::uint32_t m = 0u - static_cast<std::uint32_t>(cond);
  return (a & m) | (b & ~m);
}

// f16 -> f32, exact.
inline float f16_to_f32(std::uint16_t h) noexcept {
  const std::uint32_t sign = (std::uint32_t{h} & 0x8000u) << 16;
  const std::uint32_t em = std::uint32_t{h} & 0x7fffu;  // exponent and mantissa
  // Normal: rebias the exponent by 127 - 15 = 112.
  const std::uint32_t normal = (em << 13) + 0x38000000u;
  // Inf/NaN: all-ones f32 exponent, mantissa (and so the NaN payload and quiet bit) kept.
  const std::uint32_t infnan = (em << 13) | 0x7f800000u;
  // Subnormal (or zero): em * 2^-24; the int -> float conversion and the power-of-two scale are
  // exact and the result is a normal f32.
  const std::uint32_t sub =
      std::bit_cast<std::uint32_t>(static_cast<float>(static_cast<std::int32_t>(em)) * 0x1p-24f);
  std::uint32_t r = select(static_cast<std::int32_t>(em) >= 0x7c00, infnan, normal);
  r = select(static_cast<std::int32_t>(em) < 0x0400, sub, r);
  return std::bit_cast<float>(r | sign);
}

// f32 -> f16, round to nearest even.
inline std::uint16_t f32_to_f16(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t a = x & 0x7fffffffu;  // |f|
  // Normal result: rebias the exponent (-112 << 23 == 0xc8000000 mod 2^32), add 0xfff plus the
  // lowest kept mantissa bit so the shift rounds to nearest even. A carry out of the mantissa
  // bumps the exponent, which is right, up to and including rounding to inf (|f| >= 65520).
  const std::uint32_t odd = (a >> 13) & 1u;
  const std::uint32_t normal = (a + 0xc8000fffu + odd) >> 13;
  // Subnormal result (|f| < 2^-14): adding 0.5f aligns the value so the FPU rounds it to a
  // multiple of 2^-24 (nearest even); the low mantissa bits are then the f16 subnormal. A value
  // that rounds up to 2^-14 correctly yields 0x0400, the smallest normal.
  const std::uint32_t sub =
      std::bit_cast<std::uint32_t>(std::bit_cast<float>(a) + 0.5f) - 0x3f000000u;
  // |f| >= 2^16 (and so inf) -> inf; NaN -> quiet NaN keeping the top 9 payload bits.
  const std::uint32_t big =
      select(static_cast<std::int32_t>(a) > 0x7f800000, 0x7e00u | ((a >> 13) & 0x1ffu), 0x7c00u);
  std::uint32_t r = select(static_cast<std::int32_t>(a) < 0x38800000, sub, normal);
  r = select(static_cast<std::int32_t>(a) >= 0x47800000, big, r);
  return static_cast<std::uint16_t>(r | sign);
}

// bf16 -> f32, exact (bf16 is the top half of an f32).
inline float bf16_to_f32(std::uint16_t h) noexcept {
  return std::bit_cast<float>(std::uint32_t{h} << 16);
}

// f32 -> bf16, round to nearest even; overflow carries into inf naturally.
inline std::uint16_t f32_to_bf16(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const std::uint32_t qnan = (x >> 16) | 0x0040u;  // set the quiet bit, keep sign and payload top
  return static_cast<std::uint16_t>(
      select(static_cast<std::int32_t>(x & 0x7fffffffu) > 0x7f800000, qnan, rounded));
}

} // namespace chorus::half

// ---- kernel implementation selection (internal; defined in reduce_kernels.cpp) ---------------
// The reduction kernels exist in a portable build (whatever the compiler targets: SSE2 on plain
// x86-64) and, on x86-64, a build for AVX2 whose f16 kernels convert with F16C instructions and
// whose bf16 kernels use AVX2 intrinsics. The latter is picked automatically (on first use) when
// the CPU supports it. Both give the same results (which NaN payload wins among several NaN
// operands aside). These hooks let tests and benchmarks exercise each; each kernel call uses one
// table or the other, so switching while other threads run kernels is safe but pointless.
namespace chorus {
enum class KernelIsa : unsigned char { portable, avx2_f16c };
bool kernel_isa_supported(KernelIsa isa);
KernelIsa kernel_isa();
// Returns false, changing nothing, when the CPU (or build) lacks `isa`.
bool set_kernel_isa(KernelIsa isa);
} // namespace chorus
