// CUDA's name and text for an error, after `what`. For cuda/ only (it includes the CUDA runtime).
#pragma once
#include <cuda_runtime.h>

#include <string>

namespace chorus::gpu {

inline std::string cuda_error(const std::string& what, cudaError_t e) {
  return what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}

} // namespace chorus::gpu
