// What a Tensor needs of GPU memory. core/ sits below cuda/, so it reaches GPU memory through this
// table, which the cuda layer fills in when chorus is built with CUDA (cuda/gpu.cpp installs it
// before main). Without it every GPU request fails with a device_error saying so.
#pragma once
#include <cstddef>

#include <chorus/status.hpp>

namespace chorus {

class DeviceMemory {
 public:
  static constexpr int kHost = -1;  // the "device" of host memory in copy()
  virtual ~DeviceMemory() = default;
  // Device memory of `device` (cudaMalloc on its device actor). release() of nullptr is a no-op.
  virtual Status allocate(int device, std::size_t bytes, void** out) = 0;
  virtual void release(int device, void* p) noexcept = 0;
  // Synchronous copy between host (kHost) and device memory, or between two GPUs.
  virtual Status copy(void* dst, int dst_device, const void* src, int src_device, std::size_t bytes) = 0;
  virtual Status memset_zero(int device, void* p, std::size_t bytes) = 0;
};

// The installed table, or one that answers every request with "built without CUDA".
DeviceMemory& device_memory();
// Called once by the GPU layer at start-up.
void install_device_memory(DeviceMemory* m);

} // namespace chorus
