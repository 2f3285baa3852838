#include "core/device_memory.hpp"

#include <atomic>

namespace chorus {

namespace {

class NoDevices final : public DeviceMemory {
  static Status none() {
    return {Errc::device_error,
            "chorus was built without CUDA (configure with nvcc on the PATH or -DCHORUS_WITH_CUDA=ON)"};
  }

 public:
  Status allocate(int, std::size_t, void** out) override {
    *out = nullptr;
    return none();
  }
  void release(int, void*) noexcept override {}
  Status copy(void*, int, const void*, int, std::size_t) override { return none(); }
  Status memset_zero(int, void*, std::size_t) override { return none(); }
};

NoDevices no_devices;
std::atomic<DeviceMemory*> installed{nullptr};

} // namespace

DeviceMemory& device_memory() {
  DeviceMemory* m = installed.load(std::memory_order_acquire);
  return m ? *m : no_devices;
}

void install_device_memory(DeviceMemory* m) { installed.store(m, std::memory_order_release); }

} // namespace chorus
