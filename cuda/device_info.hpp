// What the host side may ask about GPUs without including CUDA headers.
#pragma once
#include <string>

namespace chorus::cuda {

// Number of usable CUDA devices; 0 when there is no driver or no device (never throws).
int device_count();
// "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)", or the CUDA error text for a bad index.
std::string device_name(int device);

} // namespace chorus::cuda
