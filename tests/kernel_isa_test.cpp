// Choosing the kernel implementation (portable or AVX2 + F16C), and both giving the same bits.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernel_checks.hpp"

namespace chorus {
namespace {

using namespace testing;

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

} // namespace
} // namespace chorus
