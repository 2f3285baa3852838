// GPU checks: they run for real where a CUDA device is present and report themselves skipped,
// visibly, where none is (CI and the development machines have no GPU).
#include <gtest/gtest.h>

#include "cuda/gpu.hpp"
#include "status_matchers.hpp"

namespace {

TEST(CudaDevice, ReportsDevicesOrSkips) {
  int n = chorus::gpu::device_count();
  if (n == 0) GTEST_SKIP() << "no CUDA device on this machine";
  EXPECT_GT(n, 0);
  for (int d = 0; d < n; ++d) {
    std::string name = chorus::gpu::device_name(d);
    EXPECT_NE(name.find("sm_"), std::string::npos) << name;
  }
}

TEST(CudaDevice, BadIndexIsAnErrorNotACrash) {
  if (chorus::gpu::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  EXPECT_EQ(chorus::gpu::device_name(1 << 20).find("sm_"), std::string::npos);
}

// CUDA's own name and text reach the caller as a device_error naming the call, its size and the
// device; the device actor stays usable.
TEST(CudaDevice, AFailedAllocationIsADeviceErrorWithCudasWords) {
  if (chorus::gpu::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  void* p = nullptr;
  const std::size_t huge = std::size_t{1} << 50;  // a petabyte: no GPU has it
  EXPECT_TRUE(chorus::has(chorus::gpu::allocate(0, huge, &p), chorus::Errc::device_error,
                          {"cudaMalloc of " + std::to_string(huge) + " bytes on cuda:0", "cudaErrorMemoryAllocation"}));
  EXPECT_EQ(p, nullptr);
  ASSERT_TRUE(chorus::gpu::allocate(0, 256, &p).is_ok());
  EXPECT_NE(p, nullptr);
  EXPECT_TRUE(chorus::gpu::memset_zero(0, p, 256).is_ok());
  unsigned char back[256];
  for (auto& b : back) b = 0xab;
  EXPECT_TRUE(chorus::gpu::copy(back, chorus::gpu::kHost, p, 0, sizeof back).is_ok());
  for (auto b : back) ASSERT_EQ(b, 0);
  chorus::gpu::release(0, p);
}

} // namespace
