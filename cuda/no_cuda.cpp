// gpu.hpp in a build without CUDA: there are no devices, and every request says why.
#include "cuda/gpu.hpp"

namespace chorus::gpu {

namespace {
const std::string kNoCuda = "chorus was built without CUDA (configure with nvcc on the PATH or -DCHORUS_WITH_CUDA=ON)";
}

bool built_with_cuda() { return false; }
int device_count() { return 0; }
std::string device_name(int) { return kNoCuda; }
std::string allocate(int, std::size_t, void** out) {
  *out = nullptr;
  return kNoCuda;
}
void release(int, void*) noexcept {}
std::string allocate_pinned(std::size_t, void** out) {
  *out = nullptr;
  return kNoCuda;
}
void release_pinned(void*) noexcept {}
std::string copy(void*, int, const void*, int, std::size_t) { return kNoCuda; }
std::string memset_zero(int, void*, std::size_t) { return kNoCuda; }
std::string accumulate(int, DType, void*, const void*, std::size_t) { return kNoCuda; }
std::string run_collective(const DeviceCollective& c, std::chrono::steady_clock::time_point) {
  return c.label + ": " + kNoCuda;
}
std::string copy_bandwidth(int, std::size_t, double& gb_per_s) {
  gb_per_s = 0;
  return kNoCuda;
}
bool nccl_supports(const DeviceCollective&) { return false; }

} // namespace chorus::gpu
