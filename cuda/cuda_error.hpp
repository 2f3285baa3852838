// CUDA's name and text for an error, after `what`, as a device_error. For cuda/ only (it includes
// the CUDA runtime).
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "cuda/device_status.hpp"

namespace chorus::gpu {

inline Status cuda_error(const std::string& what, cudaError_t e) {
  return device_error(what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

} // namespace chorus::gpu
