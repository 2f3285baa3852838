// What a host app may ask about GPUs. Tensors go to a GPU with Device::cuda(k) (chorus/tensor.hpp);
// collectives on GPU tensors run on the GPUs themselves (see the README's "GPU tensors").
#pragma once
#include <string>

namespace chorus::gpu {

// Whether this chorus was built with its CUDA layer (nvcc was found at configure time).
bool built_with_cuda();
// Usable CUDA devices; 0 with no driver, no device, or a build without CUDA. Never throws.
int device_count();
// "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)", or the error text for a bad index.
std::string device_name(int device);

} // namespace chorus::gpu
