// GPU checks: they run for real where a CUDA device is present and report themselves skipped,
// visibly, where none is (CI and the development machines have no GPU).
#include <gtest/gtest.h>

#include "cuda/gpu.hpp"

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

} // namespace
