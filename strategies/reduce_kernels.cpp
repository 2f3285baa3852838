// Host-memory reduction kernels.
//
// Layout: reduce_kernel_loops.hpp holds the element traits, the ops, the loop bodies and the
// table type; this file the portable table and the dispatch; reduce_kernels_avx2.cpp the AVX2
// table. All three compile with -O3 (strategies/CMakeLists.txt).
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
#include <cstring>

#include "strategies/reduce_kernel_loops.hpp"

namespace chorus {

namespace kernels {

namespace {

// The portable kernels: the generic loops compiled for whatever the build targets.
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

} // namespace

constinit const KernelTable portable_table = make_table<Portable>();

} // namespace kernels

namespace {

using namespace kernels;

// The active table; nullptr until first use (constant-initialized, so kernels called from other
// static initializers work too).
std::atomic<const KernelTable*> g_active{nullptr};

const KernelTable* table_for(KernelIsa isa) {
  if (isa == KernelIsa::avx2_f16c && avx2_table() != nullptr) return avx2_table();
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
