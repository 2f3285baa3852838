// The batched copy: several copies within one GPU in one kernel launch (cuda/device_plan.hpp's
// copies step), the copies running at once in no order. 16-byte words where both ends allow,
// else 4-byte words, then bytes. Host-callable from the device actor's thread; no CUDA header.
#pragma once
#include <cstddef>
#include <vector>

#include <chorus/status.hpp>

#include "cuda/device_plan.hpp"

namespace chorus::gpu {

// Launches on `stream` (a cudaStream_t of the current device); at most kMaxBatchedCopies copies.
// Returns the launch error (device_error) or ok.
Status launch_copies(void* stream, const std::vector<DeviceCopy>& copies);
// Loads the kernel on the current device now (see preload_reduce_kernels).
Status preload_copy_kernel();

} // namespace chorus::gpu
