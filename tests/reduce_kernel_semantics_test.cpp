// Targeted semantics of the reduction kernels, on every kernel implementation: integer wrap-around,
// NaN handling of min/max, correctly rounded f16/bf16 results, divide_by's rounding and
// truncation, and large unaligned reduce_n.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernel_checks.hpp"

namespace chorus {
namespace {

using namespace testing;

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
