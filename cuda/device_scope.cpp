#include "cuda/device_scope.hpp"

#include <cuda_runtime.h>

namespace chorus::gpu {

DeviceScope::DeviceScope(int device) {
  if (cudaGetDevice(&before_) != cudaSuccess) before_ = -1;
  if (before_ != device) cudaSetDevice(device);
}

DeviceScope::~DeviceScope() {
  int now = -1;
  if (before_ >= 0 && cudaGetDevice(&now) == cudaSuccess && now != before_) cudaSetDevice(before_);
}

} // namespace chorus::gpu
