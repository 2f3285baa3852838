// Tests for the host reduction kernels (strategies/reduce_kernels.hpp): every dtype x valid op
// against a scalar reference, reduce_n with 1..5 sources, odd sizes and aliasing; the f16/bf16
// conversions exhaustively and against an independent double-based reference; divide_by.
#include "strategies/reduce_kernels.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <chorus/types.hpp>
#include "strategies/half_float.hpp"

namespace chorus {
namespace {

// ---- independent references for the conversions (double arithmetic, no bit tricks) ----------

// f16 bits -> value, from the IEEE definition.
double ref_f16_value(std::uint16_t h) {
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
std::uint16_t ref_round(double v, int p, int emin, std::uint16_t inf_bits, double overflow,
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
std::uint16_t ref_to_f16(double v) { return ref_round(v, 11, -14, 0x7c00, 65520.0, 0x7e00); }
std::uint16_t ref_to_bf16(double v) {
  return ref_round(v, 8, -126, 0x7f80, std::ldexp(2.0 - std::ldexp(1.0, -8), 127), 0x7fc0);
}

bool f16_is_nan(std::uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }
bool bf16_is_nan(std::uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f); }

std::uint32_t bits_of(float f) { return std::bit_cast<std::uint32_t>(f); }
float float_of(std::uint32_t u) { return std::bit_cast<float>(u); }

// ---- conversions -----------------------------------------------------------------------------

TEST(HalfConversion, F16ToF32ExhaustiveMatchesDefinitionAndRoundTrips) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto hb = static_cast<std::uint16_t>(h);
    const float f = f16_to_f32(hb);
    const double want = ref_f16_value(hb);
    if (f16_is_nan(hb)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
      const std::uint16_t back = f32_to_f16(f);
      ASSERT_TRUE(f16_is_nan(back)) << std::hex << h;
      EXPECT_EQ(back & 0x8000, h & 0x8000);
      EXPECT_EQ(back | 0x0200, h | 0x0200) << "payload kept, quiet bit set: " << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), want) << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
      ASSERT_EQ(f32_to_f16(f), hb) << std::hex << h;
    }
  }
}

TEST(HalfConversion, Bf16ToF32ExhaustiveRoundTrips) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto hb = static_cast<std::uint16_t>(h);
    const float f = bf16_to_f32(hb);
    ASSERT_EQ(bits_of(f), h << 16) << std::hex << h;  // bf16 is the top half of an f32
    const std::uint16_t back = f32_to_bf16(f);
    if (bf16_is_nan(hb)) {
      ASSERT_TRUE(std::isnan(f));
      ASSERT_TRUE(bf16_is_nan(back)) << std::hex << h;
      EXPECT_EQ(back, h | 0x0040) << "sign and payload kept, quiet bit set: " << std::hex << h;
    } else {
      ASSERT_EQ(back, hb) << std::hex << h;
    }
  }
}

// For every pair of adjacent finite positive f16 (bf16) values: the exact midpoint (representable
// in f32) rounds to the even one, and one f32 ulp either side rounds down / up; every f16 value
// itself and one ulp around it round to it.
TEST(HalfConversion, F16RoundsToNearestEvenAtEveryTie) {
  for (std::uint16_t h = 0; h < 0x7bff; ++h) {
    const float lo = f16_to_f32(h), hi = f16_to_f32(static_cast<std::uint16_t>(h + 1));
    const float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);
    ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(lo) + hi) / 2) << "midpoint exact";
    const std::uint16_t even = (h & 1) ? static_cast<std::uint16_t>(h + 1) : h;
    ASSERT_EQ(f32_to_f16(mid), even) << std::hex << h;
    ASSERT_EQ(f32_to_f16(std::nextafter(mid, 0.0f)), h) << std::hex << h;
    ASSERT_EQ(f32_to_f16(std::nextafter(mid, INFINITY)), h + 1) << std::hex << h;
    ASSERT_EQ(f32_to_f16(-mid), even | 0x8000) << std::hex << h;
    if (h > 0) {
      ASSERT_EQ(f32_to_f16(std::nextafter(lo, 0.0f)), h) << std::hex << h;
    }
    ASSERT_EQ(f32_to_f16(std::nextafter(lo, INFINITY)), h) << std::hex << h;
  }
}

TEST(HalfConversion, Bf16RoundsToNearestEvenAtEveryTie) {
  for (std::uint16_t h = 0; h < 0x7f7f; ++h) {
    const std::uint32_t lo = std::uint32_t{h} << 16;
    const std::uint16_t even = (h & 1) ? static_cast<std::uint16_t>(h + 1) : h;
    const std::uint32_t mid = lo + 0x8000;  // exact midpoint to the next bf16
    ASSERT_EQ(f32_to_bf16(float_of(mid)), even) << std::hex << h;
    ASSERT_EQ(f32_to_bf16(float_of(mid - 1)), h) << std::hex << h;
    ASSERT_EQ(f32_to_bf16(float_of(mid + 1)), h + 1) << std::hex << h;
    ASSERT_EQ(f32_to_bf16(float_of(mid | 0x80000000u)), even | 0x8000) << std::hex << h;
  }
}

TEST(HalfConversion, RandomF32MatchesReference) {
  std::mt19937 rng(12345);
  for (int i = 0; i < 400000; ++i) {
    const std::uint32_t u = rng();
    const float f = float_of(u);
    if (std::isnan(f)) {
      ASSERT_TRUE(f16_is_nan(f32_to_f16(f)));
      ASSERT_TRUE(bf16_is_nan(f32_to_bf16(f)));
      continue;
    }
    ASSERT_EQ(f32_to_f16(f), ref_to_f16(f)) << std::hex << u;
    ASSERT_EQ(f32_to_bf16(f), ref_to_bf16(f)) << std::hex << u;
    // Also values concentrated in f16's range (exponents 2^-26 .. 2^17).
    const float g = float_of((u & 0x807fffffu) | ((100u + (u >> 23) % 45) << 23));
    ASSERT_EQ(f32_to_f16(g), ref_to_f16(g)) << std::hex << bits_of(g);
  }
}

TEST(HalfConversion, InfinityOverflowAndSpecials) {
  // f16: max finite 65504; [65504, 65520) rounds down, 65520 (tie) and above overflow to inf.
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.996f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-65520.0f), 0xfc00);
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(f32_to_f16(INFINITY), 0x7c00);
  EXPECT_EQ(f32_to_f16(-INFINITY), 0xfc00);
  EXPECT_EQ(f16_to_f32(0x7c00), INFINITY);
  EXPECT_EQ(f16_to_f32(0xfc00), -INFINITY);
  EXPECT_TRUE(f16_is_nan(f32_to_f16(NAN)));
  EXPECT_TRUE(f16_is_nan(f32_to_f16(float_of(0x7f800001u))));  // payload only in dropped bits
  EXPECT_TRUE(f16_is_nan(f32_to_f16(float_of(0xff800001u))));
  // Subnormals and underflow: 2^-24 is the smallest f16 subnormal; 2^-25 is a tie -> 0.
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp tie -> even (2)
  EXPECT_EQ(f32_to_f16(-std::ldexp(1.0f, -30)), 0x8000);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)), 0x0400);  // up to normal
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));

  // bf16: max finite (2 - 2^-7) * 2^127; the tie above it overflows.
  const float bf_max = std::ldexp(2.0f - std::ldexp(1.0f, -7), 127);
  EXPECT_EQ(f32_to_bf16(bf_max), 0x7f7f);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-INFINITY), 0xff80);
  EXPECT_TRUE(bf16_is_nan(f32_to_bf16(NAN)));
  EXPECT_TRUE(bf16_is_nan(f32_to_bf16(float_of(0x7f800001u))));
  EXPECT_TRUE(bf16_is_nan(f32_to_bf16(float_of(0xffffffffu))));
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::denorm_min()), 0x0000);  // tie -> even 0
  EXPECT_EQ(f32_to_bf16(float_of(0x00008001u)), 0x0001);
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
}

TEST(HalfConversion, PublicFunctionsMatchInlineHeader) {
  for (std::uint32_t h = 0; h < 65536; h += 7) {
    const auto hb = static_cast<std::uint16_t>(h);
    EXPECT_EQ(bits_of(f16_to_f32(hb)), bits_of(half::f16_to_f32(hb)));
    EXPECT_EQ(bits_of(bf16_to_f32(hb)), bits_of(half::bf16_to_f32(hb)));
    const float f = float_of(h * 65599u);
    EXPECT_EQ(f32_to_f16(f), half::f32_to_f16(f));
    EXPECT_EQ(f32_to_bf16(f), half::f32_to_bf16(f));
  }
}

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
void visit_dtype(DType t, F&& f) {
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
bool same(typename T::Storage got, typename T::Storage want) {
  if constexpr (std::is_floating_point_v<typename T::Acc>) {
    const auto g = to_acc<T>(got), w = to_acc<T>(want);
    return (std::isnan(g) && std::isnan(w)) || g == w;
  } else {
    return got == want;
  }
}

template <class T>
std::string show(typename T::Storage v) {
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

bool is_valid(DType t, ReduceOp op) { return reduce_op_valid(t, op); }

// Odd tails; 4099 also crosses the 4096-element reduce_n block and the 512-element F16C stage.
constexpr std::size_t kSizes[] = {0, 1, 3, 17, 1000, 4099};

std::string isa_name(KernelIsa isa) {
  return isa == KernelIsa::portable ? "portable" : "avx2_f16c";
}
constexpr KernelIsa kAllIsas[] = {KernelIsa::portable, KernelIsa::avx2_f16c};

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

class KernelTest : public ::testing::TestWithParam<std::tuple<DType, KernelIsa>> {
 protected:
  void SetUp() override {
    scope_ = std::make_unique<IsaScope>(std::get<1>(GetParam()));
    if (!scope_->ok()) GTEST_SKIP() << "CPU lacks " << isa_name(std::get<1>(GetParam()));
  }
  void TearDown() override { scope_.reset(); }
  DType dtype() const { return std::get<0>(GetParam()); }

 private:
  std::unique_ptr<IsaScope> scope_;
};

TEST_P(KernelTest, Reduce2MatchesReference) {
  visit_dtype(dtype(), [](auto tag) {
    using T = decltype(tag);
    using S = typename T::Storage;
    std::mt19937_64 rng(1 + static_cast<int>(T::dtype));
    for (ReduceOp op : all_reduce_ops) {
      if (!is_valid(T::dtype, op)) continue;
      for (std::size_t n : kSizes) {
        SCOPED_TRACE(std::string(to_string(T::dtype)) + " " + std::string(to_string(op)) +
                     " n=" + std::to_string(n));
        auto a = random_data<T>(n, rng), b = random_data<T>(n, rng);
        std::vector<S> want(n);
        for (std::size_t i = 0; i < n; ++i)
          want[i] = from_acc<T>(ref_combine(op, to_acc<T>(a[i]), to_acc<T>(b[i])));
        // Separate dst, with guard elements around it that must stay untouched.
        std::vector<S> dst(n + 2, S{});
        std::memset(dst.data(), 0x5a, dst.size() * sizeof(S));
        const std::vector<S> guard_image = dst;
        reduce2(T::dtype, op, dst.data() + 1, a.data(), b.data(), n);
        ASSERT_EQ(std::memcmp(&dst[0], &guard_image[0], sizeof(S)), 0);
        ASSERT_EQ(std::memcmp(&dst[n + 1], &guard_image[n + 1], sizeof(S)), 0);
        for (std::size_t i = 0; i < n; ++i)
          ASSERT_TRUE(same<T>(dst[i + 1], want[i]))
              << "i=" << i << " got " << show<T>(dst[i + 1]) << " want " << show<T>(want[i]);
        // dst == a.
        auto a2 = a;
        reduce2(T::dtype, op, a2.data(), a2.data(), b.data(), n);
        for (std::size_t i = 0; i < n; ++i)
          ASSERT_TRUE(same<T>(a2[i], want[i])) << "dst==a i=" << i;
        // dst == b.
        auto b2 = b;
        reduce2(T::dtype, op, b2.data(), a.data(), b2.data(), n);
        for (std::size_t i = 0; i < n; ++i)
          ASSERT_TRUE(same<T>(b2[i], want[i])) << "dst==b i=" << i;
      }
    }
  });
}

TEST_P(KernelTest, ReduceNMatchesReference) {
  visit_dtype(dtype(), [](auto tag) {
    using T = decltype(tag);
    using S = typename T::Storage;
    using A = typename T::Acc;
    std::mt19937_64 rng(100 + static_cast<int>(T::dtype));
    for (ReduceOp op : all_reduce_ops) {
      if (!is_valid(T::dtype, op)) continue;
      for (std::size_t n : kSizes) {
        // 1..5 sources, and more to cover the multi-pass path (groups of 4 sources per pass).
        for (std::size_t nsrc : {1, 2, 3, 4, 5, 7, 13}) {
          SCOPED_TRACE(std::string(to_string(T::dtype)) + " " + std::string(to_string(op)) +
                       " n=" + std::to_string(n) + " nsrc=" + std::to_string(nsrc));
          std::vector<std::vector<S>> src;
          for (std::size_t k = 0; k < nsrc; ++k) src.push_back(random_data<T>(n, rng));
          // Reference: left fold in the accumulation type (f32 for f16/bf16), rounded once.
          std::vector<S> want(n);
          for (std::size_t i = 0; i < n; ++i) {
            A acc = to_acc<T>(src[0][i]);
            for (std::size_t k = 1; k < nsrc; ++k) acc = ref_combine(op, acc, to_acc<T>(src[k][i]));
            want[i] = from_acc<T>(acc);
          }
          std::vector<const void*> ptrs;
          for (auto& s : src) ptrs.push_back(s.data());

          std::vector<S> dst(n + 2);
          std::memset(dst.data(), 0xa5, dst.size() * sizeof(S));
          const std::vector<S> guard_image = dst;
          reduce_n(T::dtype, op, dst.data() + 1, ptrs.data(), nsrc, n);
          ASSERT_EQ(std::memcmp(&dst[0], &guard_image[0], sizeof(S)), 0);
          ASSERT_EQ(std::memcmp(&dst[n + 1], &guard_image[n + 1], sizeof(S)), 0);
          for (std::size_t i = 0; i < n; ++i)
            ASSERT_TRUE(same<T>(dst[i + 1], want[i]))
                << "i=" << i << " got " << show<T>(dst[i + 1]) << " want " << show<T>(want[i]);

          // dst == srcs[0] (the documented aliasing), then dst == the last source.
          auto s0 = src[0];
          ptrs[0] = s0.data();
          reduce_n(T::dtype, op, s0.data(), ptrs.data(), nsrc, n);
          for (std::size_t i = 0; i < n; ++i)
            ASSERT_TRUE(same<T>(s0[i], want[i])) << "dst==srcs[0] i=" << i;
          ptrs[0] = src[0].data();
          auto last = src[nsrc - 1];
          ptrs[nsrc - 1] = last.data();
          reduce_n(T::dtype, op, last.data(), ptrs.data(), nsrc, n);
          for (std::size_t i = 0; i < n; ++i)
            ASSERT_TRUE(same<T>(last[i], want[i])) << "dst==last i=" << i;
        }
      }
    }
  });
}

// reduce_n with two sources is exactly reduce2; with one source it is a copy.
TEST_P(KernelTest, ReduceNAgreesWithReduce2AndCopies) {
  visit_dtype(dtype(), [](auto tag) {
    using T = decltype(tag);
    using S = typename T::Storage;
    std::mt19937_64 rng(7);
    const std::size_t n = 333;
    auto a = random_data<T>(n, rng), b = random_data<T>(n, rng);
    for (ReduceOp op : all_reduce_ops) {
      if (!is_valid(T::dtype, op)) continue;
      std::vector<S> d2(n), dn(n);
      const void* ptrs[] = {a.data(), b.data()};
      reduce2(T::dtype, op, d2.data(), a.data(), b.data(), n);
      reduce_n(T::dtype, op, dn.data(), ptrs, 2, n);
      EXPECT_EQ(std::memcmp(d2.data(), dn.data(), n * sizeof(S)), 0) << to_string(op);
      std::vector<S> d1(n);
      reduce_n(T::dtype, op, d1.data(), ptrs, 1, n);
      EXPECT_EQ(std::memcmp(d1.data(), a.data(), n * sizeof(S)), 0) << to_string(op);
    }
  });
}

// Invalid combinations (bitwise ops on floats), count == 0 and nsrc == 0 leave dst untouched.
TEST_P(KernelTest, InvalidCombinationsAndEmptyCallsAreNoOps) {
  visit_dtype(dtype(), [](auto tag) {
    using T = decltype(tag);
    using S = typename T::Storage;
    std::mt19937_64 rng(9);
    const std::size_t n = 40;
    auto a = random_data<T>(n, rng), b = random_data<T>(n, rng);
    const void* ptrs[] = {a.data(), b.data()};
    for (ReduceOp op : all_reduce_ops) {
      std::vector<S> dst(n);
      std::memset(dst.data(), 0x3c, n * sizeof(S));
      const auto image = dst;
      if (!is_valid(T::dtype, op)) {
        reduce2(T::dtype, op, dst.data(), a.data(), b.data(), n);
        reduce_n(T::dtype, op, dst.data(), ptrs, 2, n);
        reduce_n(T::dtype, op, dst.data(), ptrs, 1, n);
      }
      reduce2(T::dtype, op, dst.data(), a.data(), b.data(), 0);
      reduce_n(T::dtype, op, dst.data(), ptrs, 2, 0);
      reduce_n(T::dtype, op, dst.data(), ptrs, 0, n);
      reduce2(T::dtype, op, nullptr, nullptr, nullptr, 0);
      reduce_n(T::dtype, op, nullptr, nullptr, 3, 0);
      EXPECT_EQ(std::memcmp(dst.data(), image.data(), n * sizeof(S)), 0) << to_string(op);
    }
    std::vector<S> dst(n);
    std::memset(dst.data(), 0x3c, n * sizeof(S));
    const auto image = dst;
    divide_by(T::dtype, dst.data(), n, 0);  // documented: divisor 0 is a no-op
    divide_by(T::dtype, dst.data(), n, 1);
    divide_by(T::dtype, nullptr, 0, 3);
    EXPECT_EQ(std::memcmp(dst.data(), image.data(), n * sizeof(S)), 0);
  });
}

TEST_P(KernelTest, DivideByMatchesReference) {
  visit_dtype(dtype(), [](auto tag) {
    using T = decltype(tag);
    using S = typename T::Storage;
    std::mt19937_64 rng(11);
    for (std::size_t divisor : {2u, 3u, 7u, 8u, 1000u}) {
      for (std::size_t n : {std::size_t{1}, std::size_t{17}, std::size_t{4099}}) {
        auto v = random_data<T>(n, rng);
        auto d = v;
        divide_by(T::dtype, d.data(), n, divisor);
        for (std::size_t i = 0; i < n; ++i) {
          S want;
          if constexpr (T::dtype == DType::f16) {
            want = ref_to_f16(static_cast<double>(f16_to_f32(v[i])) / static_cast<double>(divisor));
          } else if constexpr (T::dtype == DType::bf16) {
            want =
                ref_to_bf16(static_cast<double>(bf16_to_f32(v[i])) / static_cast<double>(divisor));
          } else if constexpr (std::is_same_v<S, float>) {
            want = static_cast<float>(static_cast<double>(v[i]) / static_cast<double>(divisor));
          } else if constexpr (std::is_same_v<S, double>) {
            want = v[i] / static_cast<double>(divisor);
          } else {
            // Truncating division toward zero, via magnitudes in 128-bit to avoid any C++ `/`.
            const __int128 x = v[i];
            const __int128 mag = x < 0 ? -x : x;
            const __int128 q = mag / static_cast<__int128>(divisor);
            want = static_cast<S>(x < 0 ? -q : q);
          }
          ASSERT_TRUE(same<T>(d[i], want)) << "divisor " << divisor << " i=" << i << " v="
                                           << show<T>(v[i]) << " got " << show<T>(d[i])
                                           << " want " << show<T>(want);
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, KernelTest,
                         ::testing::Combine(::testing::ValuesIn(all_dtypes),
                                            ::testing::ValuesIn(kAllIsas)),
                         [](const ::testing::TestParamInfo<KernelTest::ParamType>& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_" +
                                  isa_name(std::get<1>(info.param));
                         });

// The targeted tests below run on every kernel implementation too.
class ReduceKernels : public ::testing::TestWithParam<KernelIsa> {
 protected:
  void SetUp() override {
    scope_ = std::make_unique<IsaScope>(GetParam());
    if (!scope_->ok()) GTEST_SKIP() << "CPU lacks " << isa_name(GetParam());
  }
  void TearDown() override { scope_.reset(); }

 private:
  std::unique_ptr<IsaScope> scope_;
};
INSTANTIATE_TEST_SUITE_P(Isa, ReduceKernels, ::testing::ValuesIn(kAllIsas),
                         [](const ::testing::TestParamInfo<KernelIsa>& info) {
                           return isa_name(info.param);
                         });

TEST(KernelIsaSelection, DefaultIsBestSupportedAndSwitchable) {
  EXPECT_TRUE(kernel_isa_supported(KernelIsa::portable));
  const KernelIsa def = kernel_isa();
  EXPECT_EQ(
      def, kernel_isa_supported(KernelIsa::avx2_f16c) ? KernelIsa::avx2_f16c : KernelIsa::portable);
  EXPECT_TRUE(set_kernel_isa(KernelIsa::portable));
  EXPECT_EQ(kernel_isa(), KernelIsa::portable);
  EXPECT_EQ(set_kernel_isa(KernelIsa::avx2_f16c), kernel_isa_supported(KernelIsa::avx2_f16c));
  set_kernel_isa(def);
  EXPECT_EQ(kernel_isa(), def);
}

// Both implementations give bit-identical results (NaN payloads aside) on every f16 / bf16 pair
// pattern class: each of the 65536 patterns against a shifted copy, every op.
TEST(KernelIsaSelection, ImplementationsAgreeBitForBitOnHalfTypes) {
  if (!kernel_isa_supported(KernelIsa::avx2_f16c)) GTEST_SKIP() << "CPU lacks avx2_f16c";
  const std::size_t n = 65536;
  std::vector<std::uint16_t> a(n), b(n), c(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = static_cast<std::uint16_t>(i);
    b[i] = static_cast<std::uint16_t>(i * 40503u + 12345u);
    c[i] = static_cast<std::uint16_t>(i * 9973u + 7u);
  }
  const void* srcs[] = {a.data(), b.data(), c.data(), b.data(), a.data()};
  for (DType t : {DType::f16, DType::bf16}) {
    auto isnan16 = [t](std::uint16_t h) {
      return t == DType::f16 ? f16_is_nan(h) : bf16_is_nan(h);
    };
    for (ReduceOp op :
         {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::avg}) {
      for (std::size_t nsrc : {2, 5}) {
        std::vector<std::uint16_t> out[2];
        for (int which = 0; which < 2; ++which) {
          IsaScope scope(kAllIsas[which]);
          out[which].assign(n, 0);
          if (nsrc == 2) reduce2(t, op, out[which].data(), a.data(), b.data(), n);
          else reduce_n(t, op, out[which].data(), srcs, nsrc, n);
          divide_by(t, out[which].data(), n, 3);
        }
        for (std::size_t i = 0; i < n; ++i) {
          if (isnan16(out[0][i])) ASSERT_TRUE(isnan16(out[1][i])) << i;
          else
            ASSERT_EQ(out[0][i], out[1][i])
                << to_string(t) << " " << to_string(op) << " nsrc " << nsrc << " i " << i;
        }
      }
    }
  }
}

// ---- targeted semantics ---------------------------------------------------------------------

TEST_P(ReduceKernels, IntegerSumAndProdWrap) {
  std::int8_t a8[] = {127, -128, 100, -1}, b8[] = {1, -1, 100, -128}, d8[4];
  reduce2(DType::i8, ReduceOp::sum, d8, a8, b8, 4);
  EXPECT_EQ(d8[0], -128);
  EXPECT_EQ(d8[1], 127);
  EXPECT_EQ(d8[2], -56);
  EXPECT_EQ(d8[3], 127);
  reduce2(DType::i8, ReduceOp::prod, d8, a8, b8, 4);
  EXPECT_EQ(d8[0], 127);
  EXPECT_EQ(d8[1], -128);   // -128 * -1 = 128 wraps to -128
  EXPECT_EQ(d8[2], 16);     // 10000 mod 256
  EXPECT_EQ(d8[3], -128);   // -1 * -128
  std::uint8_t ua[] = {255, 16}, ub[] = {2, 16}, ud[2];
  reduce2(DType::u8, ReduceOp::sum, ud, ua, ub, 2);
  EXPECT_EQ(ud[0], 1);
  EXPECT_EQ(ud[1], 32);
  reduce2(DType::u8, ReduceOp::prod, ud, ua, ub, 2);
  EXPECT_EQ(ud[0], 254);
  EXPECT_EQ(ud[1], 0);
  const std::int32_t i32max = std::numeric_limits<std::int32_t>::max();
  std::int32_t a32[] = {i32max, i32max}, b32[] = {1, 2}, d32[2];
  reduce2(DType::i32, ReduceOp::sum, d32, a32, b32, 2);
  EXPECT_EQ(d32[0], std::numeric_limits<std::int32_t>::min());
  reduce2(DType::i32, ReduceOp::prod, d32, a32, b32, 2);
  EXPECT_EQ(d32[1], -2);
  const std::int64_t i64min = std::numeric_limits<std::int64_t>::min();
  std::int64_t a64[] = {i64min, i64min}, b64[] = {-1, -1}, d64[2];
  reduce2(DType::i64, ReduceOp::sum, d64, a64, b64, 2);
  EXPECT_EQ(d64[0], std::numeric_limits<std::int64_t>::max());
  reduce2(DType::i64, ReduceOp::prod, d64, a64, b64, 2);
  EXPECT_EQ(d64[0], i64min);
}

// A signalling NaN passed through min/max comes out of the f16/bf16 kernels as a quiet NaN with
// the same sign and payload (the narrowing conversion quiets it), on every implementation.
TEST_P(ReduceKernels, HalfMinMaxQuietSignallingNaN) {
  for (DType t : {DType::f16, DType::bf16}) {
    const bool is_f16 = t == DType::f16;
    const std::uint16_t snan = is_f16 ? 0x7c01 : 0x7f81, nsnan = is_f16 ? 0xfc05 : 0xff85;
    const std::uint16_t quiet_bit = is_f16 ? 0x0200 : 0x0040;
    const std::uint16_t one = is_f16 ? f32_to_f16(1.0f) : f32_to_bf16(1.0f);
    const std::size_t n = 21;  // vector body and scalar tail
    std::vector<std::uint16_t> a(n), b(n, one), d(n);
    for (std::size_t i = 0; i < n; ++i) a[i] = i % 2 ? snan : nsnan;
    for (ReduceOp op : {ReduceOp::min, ReduceOp::max}) {
      reduce2(t, op, d.data(), a.data(), b.data(), n);
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_EQ(d[i], a[i] | quiet_bit) << to_string(t) << " " << to_string(op) << " i=" << i;
      reduce2(t, op, d.data(), b.data(), a.data(), n);
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_EQ(d[i], a[i] | quiet_bit) << to_string(t) << " " << to_string(op) << " i=" << i;
    }
  }
}

TEST_P(ReduceKernels, FloatMinMaxPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float a[] = {nan, 1.0f, nan, -INFINITY, 2.0f}, b[] = {1.0f, nan, nan, 5.0f, INFINITY}, d[5];
  reduce2(DType::f32, ReduceOp::min, d, a, b, 5);
  EXPECT_TRUE(std::isnan(d[0]) && std::isnan(d[1]) && std::isnan(d[2]));
  EXPECT_EQ(d[3], -INFINITY);
  EXPECT_EQ(d[4], 2.0f);
  reduce2(DType::f32, ReduceOp::max, d, a, b, 5);
  EXPECT_TRUE(std::isnan(d[0]) && std::isnan(d[1]) && std::isnan(d[2]));
  EXPECT_EQ(d[3], 5.0f);
  EXPECT_EQ(d[4], INFINITY);

  // Through reduce_n, a NaN in any source (first, middle, last) wins, for every float dtype.
  for (DType t : {DType::f16, DType::bf16, DType::f32, DType::f64}) {
    for (ReduceOp op : {ReduceOp::min, ReduceOp::max}) {
      for (std::size_t nanpos = 0; nanpos < 4; ++nanpos) {
        std::vector<double> vals[4];
        std::vector<std::vector<unsigned char>> bufs(4);
        const std::size_t n = 37, es = dtype_size(t);
        std::vector<const void*> ptrs;
        for (std::size_t k = 0; k < 4; ++k) {
          bufs[k].resize(n * es);
          for (std::size_t i = 0; i < n; ++i) {
            const double v = (k == nanpos && i % 3 == 0) ? NAN : static_cast<double>(k) - 1.5 + i;
            unsigned char* p = bufs[k].data() + i * es;
            if (t == DType::f16) {
              auto h = f32_to_f16(static_cast<float>(v));
              std::memcpy(p, &h, 2);
            } else if (t == DType::bf16) {
              auto h = f32_to_bf16(static_cast<float>(v));
              std::memcpy(p, &h, 2);
            } else if (t == DType::f32) {
              float f = static_cast<float>(v);
              std::memcpy(p, &f, 4);
            } else
              std::memcpy(p, &v, 8);
          }
          ptrs.push_back(bufs[k].data());
        }
        std::vector<unsigned char> out(n * es);
        reduce_n(t, op, out.data(), ptrs.data(), 4, n);
        for (std::size_t i = 0; i < n; ++i) {
          const unsigned char* p = out.data() + i * es;
          double got;
          if (t == DType::f16 || t == DType::bf16) {
            std::uint16_t h;
            std::memcpy(&h, p, 2);
            got = t == DType::f16 ? f16_to_f32(h) : bf16_to_f32(h);
          } else if (t == DType::f32) { float f; std::memcpy(&f, p, 4); got = f; }
          else std::memcpy(&got, p, 8);
          if (i % 3 == 0) {
            EXPECT_TRUE(std::isnan(got))
                << to_string(t) << " " << to_string(op) << " pos " << nanpos;
          } else {
            EXPECT_EQ(got, (op == ReduceOp::min ? -1.5 : 1.5) + static_cast<double>(i))
                << to_string(t) << " " << to_string(op);
          }
        }
      }
    }
  }
}

// reduce2 on f16/bf16 is the correctly rounded result of the exact sum/product (f32 has enough
// spare precision that rounding to f32 and then to f16/bf16 equals rounding once).
TEST_P(ReduceKernels, HalfReduce2IsCorrectlyRounded) {
  std::mt19937 rng(5);
  const std::size_t n = 1 << 16;
  std::vector<std::uint16_t> a(n), b(n), d(n);
  for (DType t : {DType::f16, DType::bf16}) {
    for (std::size_t i = 0; i < n; ++i) {
      a[i] = static_cast<std::uint16_t>(rng());
      b[i] = static_cast<std::uint16_t>(rng());
    }
    auto val = [t](std::uint16_t h) -> double {
      return t == DType::f16 ? f16_to_f32(h) : bf16_to_f32(h);
    };
    auto round = [t](double v) { return t == DType::f16 ? ref_to_f16(v) : ref_to_bf16(v); };
    auto isnan16 = [t](std::uint16_t h) {
      return t == DType::f16 ? f16_is_nan(h) : bf16_is_nan(h);
    };
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::prod}) {
      reduce2(t, op, d.data(), a.data(), b.data(), n);
      for (std::size_t i = 0; i < n; ++i) {
        // Exact in double for f16 sums/products and bf16 products; a bf16 sum of operands with
        // very different exponents may round in double, but double (53 bits >= 2*8+2) rounding
        // then bf16 rounding equals rounding the exact sum once.
        const double exact = op == ReduceOp::sum ? val(a[i]) + val(b[i]) : val(a[i]) * val(b[i]);
        const std::uint16_t want = round(exact);
        if (isnan16(want)) ASSERT_TRUE(isnan16(d[i])) << i;
        else
          ASSERT_EQ(d[i], want) << to_string(t) << " " << to_string(op) << " " << std::hex << a[i]
                                << " " << b[i];
      }
    }
  }
}

// reduce_n accumulates f16/bf16 in f32 and rounds once: summing 2048 copies of f16(0.1) gives the
// rounded exact product, while a chain of pairwise f16 reductions drifts far away.
TEST_P(ReduceKernels, HalfReduceNRoundsOnce) {
  const std::size_t nsrc = 2048, n = 67;
  for (DType t : {DType::f16, DType::bf16}) {
    const bool is_f16 = t == DType::f16;
    const std::uint16_t x = is_f16 ? f32_to_f16(0.1f) : f32_to_bf16(0.1f);
    const double xv = is_f16 ? f16_to_f32(x) : bf16_to_f32(x);
    std::vector<std::uint16_t> src(n, x);
    std::vector<const void*> ptrs(nsrc, src.data());
    std::vector<std::uint16_t> dst(n);
    reduce_n(t, ReduceOp::sum, dst.data(), ptrs.data(), nsrc, n);
    const double exact = xv * nsrc;  // exact in f32 (x has few significant bits, nsrc = 2^11)
    const std::uint16_t want = is_f16 ? ref_to_f16(exact) : ref_to_bf16(exact);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(dst[i], want) << to_string(t) << " i=" << i;

    // The same sum as repeated reduce2 (rounding after every step) is visibly worse.
    std::vector<std::uint16_t> chain(src);
    for (std::size_t k = 1; k < nsrc; ++k)
      reduce2(t, ReduceOp::sum, chain.data(), chain.data(), src.data(), n);
    const double chained = is_f16 ? f16_to_f32(chain[0]) : bf16_to_f32(chain[0]);
    const double single = is_f16 ? f16_to_f32(want) : bf16_to_f32(want);
    EXPECT_LT(std::fabs(single - exact), 0.01 * exact);
    EXPECT_GT(std::fabs(chained - exact), 0.05 * exact) << "pairwise f16 sum expected to drift";

    // avg = sum then divide_by: rounded twice at most (once per call), here back to ~x.
    divide_by(t, dst.data(), n, nsrc);
    const std::uint16_t avg_want = is_f16 ? ref_to_f16(single / nsrc) : ref_to_bf16(single / nsrc);
    EXPECT_EQ(dst[0], avg_want);
  }
}

TEST_P(ReduceKernels, DivideByIntegersTruncatesTowardZero) {
  std::int8_t i8[] = {-7, 7, -128, -128, -128, 127, -1, 0};
  divide_by(DType::i8, i8, 3, 2);
  EXPECT_EQ(i8[0], -3);
  EXPECT_EQ(i8[1], 3);
  EXPECT_EQ(i8[2], -64);
  std::int8_t m8[] = {-128, -127, 127};
  divide_by(DType::i8, m8, 3, 128);
  EXPECT_EQ(m8[0], -1);
  EXPECT_EQ(m8[1], 0);
  EXPECT_EQ(m8[2], 0);
  std::int8_t z8[] = {-128, 127};
  divide_by(DType::i8, z8, 2, 200);
  EXPECT_EQ(z8[0], 0);
  EXPECT_EQ(z8[1], 0);
  std::uint8_t u8[] = {255, 5, 0};
  divide_by(DType::u8, u8, 3, 2);
  EXPECT_EQ(u8[0], 127);
  EXPECT_EQ(u8[1], 2);
  EXPECT_EQ(u8[2], 0);
  std::int32_t i32[] = {-7, -8, -9, std::numeric_limits<std::int32_t>::min(),
                        std::numeric_limits<std::int32_t>::max(), -1};
  divide_by(DType::i32, i32, 6, 4);
  EXPECT_EQ(i32[0], -1);
  EXPECT_EQ(i32[1], -2);
  EXPECT_EQ(i32[2], -2);
  EXPECT_EQ(i32[3], std::numeric_limits<std::int32_t>::min() / 4);
  EXPECT_EQ(i32[4], std::numeric_limits<std::int32_t>::max() / 4);
  EXPECT_EQ(i32[5], 0);
  std::int32_t big32[] = {std::numeric_limits<std::int32_t>::min(),
                          std::numeric_limits<std::int32_t>::max()};
  divide_by(DType::i32, big32, 2, std::size_t{1} << 31);
  EXPECT_EQ(big32[0], -1);
  EXPECT_EQ(big32[1], 0);
  const std::int64_t i64min = std::numeric_limits<std::int64_t>::min();
  const std::int64_t i64max = std::numeric_limits<std::int64_t>::max();
  std::int64_t i64[] = {-7, i64min, i64max, -9007199254740993LL};
  divide_by(DType::i64, i64, 4, 2);
  EXPECT_EQ(i64[0], -3);
  EXPECT_EQ(i64[1], i64min / 2);
  EXPECT_EQ(i64[2], i64max / 2);
  EXPECT_EQ(i64[3], -4503599627370496LL);  // exact, not via double
  std::int64_t h64[] = {i64min, i64max, -1};
  divide_by(DType::i64, h64, 3, std::size_t{1} << 63);  // divisor above INT64_MAX
  EXPECT_EQ(h64[0], -1);
  EXPECT_EQ(h64[1], 0);
  EXPECT_EQ(h64[2], 0);
  std::int64_t q64[] = {999999999999999999LL, -999999999999999999LL};
  divide_by(DType::i64, q64, 2, 7);
  EXPECT_EQ(q64[0], 999999999999999999LL / 7);
  EXPECT_EQ(q64[1], -999999999999999999LL / 7);
}

TEST_P(ReduceKernels, DivideByFloats) {
  float f[] = {7.0f, -1.0f, 1.0f, INFINITY, 0.0f};
  divide_by(DType::f32, f, 5, 2);
  EXPECT_EQ(f[0], 3.5f);
  EXPECT_EQ(f[1], -0.5f);
  EXPECT_EQ(f[2], 0.5f);
  EXPECT_EQ(f[3], INFINITY);
  EXPECT_EQ(f[4], 0.0f);
  float g[] = {1.0f};
  divide_by(DType::f32, g, 1, 3);
  EXPECT_EQ(g[0], 1.0f / 3.0f);
  // Divisor not representable in f32: still correctly rounded (divided in double).
  const std::size_t huge = (std::size_t{1} << 24) + 1;
  float h[] = {1e30f};
  divide_by(DType::f32, h, 1, huge);
  EXPECT_EQ(h[0], static_cast<float>(1e30f / static_cast<double>(huge)));
  double d[] = {1.0, -10.0};
  divide_by(DType::f64, d, 2, 4);
  EXPECT_EQ(d[0], 0.25);
  EXPECT_EQ(d[1], -2.5);

  // f16 / bf16: every bit pattern, divided by 3 and by 1000, equals the single rounding of the
  // exact quotient (computed here in double and rounded by the independent reference).
  std::vector<std::uint16_t> all(65536);
  for (std::size_t div : {std::size_t{3}, std::size_t{1000}}) {
    for (DType t : {DType::f16, DType::bf16}) {
      for (std::uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<std::uint16_t>(i);
      divide_by(t, all.data(), all.size(), div);
      for (std::uint32_t i = 0; i < 65536; ++i) {
        const auto hb = static_cast<std::uint16_t>(i);
        if (t == DType::f16) {
          if (f16_is_nan(hb)) { ASSERT_TRUE(f16_is_nan(all[i])); continue; }
          ASSERT_EQ(all[i], ref_to_f16(ref_f16_value(hb) / static_cast<double>(div)))
              << std::hex << i;
        } else {
          if (bf16_is_nan(hb)) { ASSERT_TRUE(bf16_is_nan(all[i])); continue; }
          ASSERT_EQ(all[i],
                    ref_to_bf16(static_cast<double>(bf16_to_f32(hb)) / static_cast<double>(div)))
              << std::hex << i;
        }
      }
    }
  }
}

// Large inputs through the fused and the blocked reduce_n paths, with sources and dst at
// different (element-aligned, not vector-aligned) offsets, for f32 and f16.
TEST_P(ReduceKernels, ReduceNLargeUnaligned) {
  const std::size_t n = (1 << 16) + 5, kMax = 9;
  std::vector<float> s[kMax];
  std::vector<std::uint16_t> h[kMax];
  for (std::size_t k = 0; k < kMax; ++k) {
    s[k].resize(n + kMax);
    h[k].resize(n + kMax);
    for (std::size_t i = 0; i < n + kMax; ++i) {
      s[k][i] = static_cast<float>((i * (k + 3)) % 1000) * 0.25f;
      h[k][i] = f32_to_f16(static_cast<float>((i * (k + 5)) % 512) * 0.125f);
    }
  }
  for (std::size_t nsrc : {4, 6, 9}) {
    std::vector<const void*> fp, hp;
    for (std::size_t k = 0; k < nsrc; ++k) {
      fp.push_back(s[k].data() + k);  // misaligned by k elements
      hp.push_back(h[k].data() + k);
    }
    std::vector<float> fd(n + 1);
    std::vector<std::uint16_t> hd(n + 3);
    reduce_n(DType::f32, ReduceOp::sum, fd.data() + 1, fp.data(), nsrc, n);
    reduce_n(DType::f16, ReduceOp::sum, hd.data() + 3, hp.data(), nsrc, n);
    for (std::size_t i = 0; i < n; ++i) {
      float fw = s[0][i], hw = f16_to_f32(h[0][i]);
      for (std::size_t k = 1; k < nsrc; ++k) {
        fw += s[k][i + k];
        hw += f16_to_f32(h[k][i + k]);
      }
      ASSERT_EQ(fd[i + 1], fw) << "nsrc " << nsrc << " i " << i;
      ASSERT_EQ(hd[i + 3], f32_to_f16(hw)) << "nsrc " << nsrc << " i " << i;
    }
  }
}

} // namespace
} // namespace chorus
