// gpu.hpp in a build without CUDA: there are no devices, and every request says why.
#include "cuda/gpu.hpp"

#include "cuda/device_status.hpp"
#include "cuda/ipc_calls.hpp"
#include "cuda/nccl_calls.hpp"
#include "cuda/stream_calls.hpp"
#include "cuda/user_streams.hpp"

namespace chorus::gpu {

namespace {
const std::string kNoCuda = "chorus was built without CUDA (configure with nvcc on the PATH or -DCHORUS_WITH_CUDA=ON)";
Status no_cuda() { return device_error(kNoCuda); }
} // namespace

bool built_with_cuda() { return false; }
int device_count() { return 0; }
std::string device_name(int) { return kNoCuda; }
Status allocate(int, std::size_t, void** out) {
  *out = nullptr;
  return no_cuda();
}
void release(int, void*) noexcept {}
Status allocate_pinned(std::size_t, void** out) {
  *out = nullptr;
  return no_cuda();
}
void release_pinned(void*) noexcept {}
Status copy(void*, int, const void*, int, std::size_t) { return no_cuda(); }
Status memset_zero(int, void*, std::size_t) { return no_cuda(); }
Status accumulate(int, DType, void*, const void*, std::size_t) { return no_cuda(); }
Status run_collective(const DeviceCollective& c, std::chrono::steady_clock::time_point) {
  return in_context(c.label, no_cuda());
}
Result<double> copy_bandwidth(int, std::size_t) { return no_cuda(); }
bool nccl_supports(const DeviceCollective&) { return false; }
bool release_all(std::chrono::steady_clock::time_point) noexcept { return true; }
Kept kept() { return {}; }
NcclCalls* real_nccl_calls() { return nullptr; }
IpcCalls* real_ipc_calls() { return nullptr; }
StreamCalls* real_stream_calls() { return nullptr; }
Result<void*> make_stream(int) { return no_cuda(); }
void destroy_stream(void*) noexcept {}
Status copy_on_stream(void*, const void*, std::size_t, void*) { return no_cuda(); }
Status synchronize_stream(void*) { return no_cuda(); }

} // namespace chorus::gpu
