// The f16/bf16 <-> f32 conversions (strategies/half_float.hpp and the public scalar functions):
// exhaustively and against an independent double-based reference, ties, overflow and specials.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "kernel_checks.hpp"

namespace chorus {
namespace {

using namespace testing;

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

} // namespace
} // namespace chorus
