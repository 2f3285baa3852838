// A function of the CUDA driver, found through the runtime (cudaGetDriverEntryPointByVersion) so
// that libcuda is never linked: the driver is the machine's, the runtime is linked statically.
// For cuda/ only (it includes the CUDA runtime). Null where the driver lacks it.
#pragma once
#include <cuda_runtime.h>

namespace chorus::gpu {

template <class Fn>
Fn driver_function(const char* name, unsigned int cuda_version) {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &f, cuda_version, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess)
    return nullptr;
  return reinterpret_cast<Fn>(f);
}

} // namespace chorus::gpu
