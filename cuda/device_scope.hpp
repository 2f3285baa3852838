// Makes `device` the calling thread's current CUDA device for a scope and puts back the one it had
// (for CUDA calls made outside a device actor, on a thread that is not ours to change).
#pragma once

namespace chorus::gpu {

class DeviceScope {
 public:
  explicit DeviceScope(int device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int before_ = -1;
};

} // namespace chorus::gpu
