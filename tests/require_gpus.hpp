// GPU test cases skip themselves, visibly, where fewer CUDA devices are present than they need (CI
// and the development machines have none): REQUIRE_GPUS(k) at a case's start.
#pragma once
#include <gtest/gtest.h>

#include <chorus/gpu.hpp>

#define REQUIRE_GPUS(k)                                                                                 \
  if (::chorus::gpu::device_count() < (k))                                                              \
  GTEST_SKIP() << "needs " << (k) << " CUDA device(s); this machine has " << ::chorus::gpu::device_count() \
               << (::chorus::gpu::built_with_cuda() ? "" : " (built without CUDA)")
