// The host reduction kernels (strategies/reduce_kernels.hpp), every dtype x valid op on every kernel
// implementation, against a scalar reference: reduce2, reduce_n with 1..5 sources, odd sizes and
// aliasing, invalid combinations and empty calls, divide_by.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernel_checks.hpp"

namespace chorus {
namespace {

using namespace testing;

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

} // namespace
} // namespace chorus
