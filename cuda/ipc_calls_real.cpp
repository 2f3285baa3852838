// cuda/ipc_calls.hpp with CUDA: handles by cudaIpcGetMemHandle of the allocation that holds a
// buffer (found with the driver's cuMemGetAddressRange, through the runtime's entry point so that
// nothing links libcuda directly), opened with cudaIpcOpenMemHandle on the device's actor and kept
// (cuda/ipc_mappings.hpp); the plan runs as gpu::run_collective's.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "cuda/cuda_error.hpp"
#include "cuda/driver_entry.hpp"
#include "cuda/device_worker.hpp"
#include "cuda/gpu.hpp"
#include "cuda/ipc_calls.hpp"

namespace chorus::gpu {

namespace {

// Mappings of other processes' buffers kept beyond those an op holds (cuda/ipc_mappings.hpp).
constexpr std::size_t kKeptOpen = 256;

Clock::time_point bookkeeping_deadline() { return Clock::now() + std::chrono::seconds(60); }

// Opens and closes run on the device's actor, which owns the device's context.
Status open_on(int device, const IpcHandle& h, void** base, bool* already_mapped) {
  auto at = std::make_shared<void*>(nullptr);  // the task owns where it writes
  auto refused = std::make_shared<std::atomic<bool>>(false);  // read here even if the task outlives the wait
  Status error;
  DeviceWorker* w = DeviceWorker::find(device, error);
  if (!w) return error;
  error = w->call([at, refused, h]() -> Status {
    cudaIpcMemHandle_t handle{};
    static_assert(sizeof handle == kIpcHandleBytes);
    std::memcpy(&handle, h.data(), sizeof handle);
    if (auto e = cudaIpcOpenMemHandle(at.get(), handle, cudaIpcMemLazyEnablePeerAccess); e != cudaSuccess) {
      refused->store(e == cudaErrorAlreadyMapped);
      cudaGetLastError();  // not sticky: clear it
      return cuda_error("cudaIpcOpenMemHandle", e);
    }
    return Status::ok();
  }, bookkeeping_deadline(), "opening another process's buffer on cuda:" + std::to_string(device));
  *already_mapped = refused->load();
  if (error.is_ok()) *base = *at;
  return error;
}

void close_on(int device, void* base) {
  (void)DeviceWorker::of(device).call([base]() -> Status {
    cudaIpcCloseMemHandle(base);
    return Status::ok();
  });
}

class CudaIpc final : public IpcCalls {
 public:
  std::string name() const override { return "CUDA IPC"; }

  Status identify(int device, GpuUuid& id) override {
    std::lock_guard<std::mutex> lock(mu_);  // asked once per device (and op): kept, failures too
    auto it = known_.find(device);
    if (it == known_.end()) {
      cudaDeviceProp p{};
      Known k;
      if (auto e = cudaGetDeviceProperties(&p, device); e != cudaSuccess) {
        k.status = cuda_error("cuda:" + std::to_string(device), e);
        cudaGetLastError();  // not sticky: clear it
      } else {
        static_assert(sizeof(p.uuid.bytes) == std::tuple_size_v<GpuUuid>);
        std::memcpy(k.id.data(), p.uuid.bytes, k.id.size());
      }
      it = known_.emplace(device, k).first;
    }
    id = it->second.id;
    return it->second.status;
  }

  Status export_buffer(int device, const void* p, IpcBuffer& b) override {
    auto out = std::make_shared<IpcBuffer>();  // the task owns where it writes
    Status error;
    DeviceWorker* w = DeviceWorker::find(device, error);
    if (!w) return error;
    error = w->call([p, out]() -> Status {
      CUdeviceptr base = 0;
      std::size_t size = 0;
      if (auto e = address_range(p, base, size); !e.is_ok()) return e;
      cudaIpcMemHandle_t h{};
      if (auto e = cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(base)); e != cudaSuccess)
        return cuda_error("cudaIpcGetMemHandle", e);
      static_assert(sizeof h == kIpcHandleBytes);
      std::memcpy(out->handle.data(), &h, sizeof h);
      out->offset = reinterpret_cast<uintptr_t>(p) - base;
      return Status::ok();
    }, bookkeeping_deadline(), "exporting a buffer of cuda:" + std::to_string(device));
    if (error.is_ok()) b = *out;
    return error;
  }

  Status open_buffer(int device, const IpcBuffer& b, void** p) override {
    void* base = nullptr;
    if (auto e = mappings_.acquire(device, b.handle, &base, bookkeeping_deadline()); !e.is_ok()) return e;
    *p = static_cast<std::byte*>(base) + b.offset;
    return Status::ok();
  }

  void release_buffer(int device, const IpcBuffer& b) override { mappings_.release(device, b.handle); }

  Status run(const DeviceCollective& c, Clock::time_point deadline) override {
    DeviceCollective plain = c;
    plain.use_nccl = false;  // one GPU: the fused plan
    return run_collective(plain, deadline);
  }

 private:
  // The allocation that holds `p` (the caller's tensor may start inside one).
  static Status address_range(const void* p, CUdeviceptr& base, std::size_t& size) {
    static const auto fn = driver_function<PFN_cuMemGetAddressRange_v3020>("cuMemGetAddressRange", 3020);
    if (!fn) return device_error("cuMemGetAddressRange: not found in the CUDA driver");
    if (CUresult r = fn(&base, &size, reinterpret_cast<CUdeviceptr>(p)); r != CUDA_SUCCESS)
      return device_error("cuMemGetAddressRange: CUDA driver error " + std::to_string(static_cast<int>(r)) +
                          " (not memory of this GPU?)");
    return Status::ok();
  }

 public:
  std::size_t release_idle() { return mappings_.close_idle(); }
  std::size_t mapped() const { return mappings_.mapped(); }

 private:
  struct Known {
    GpuUuid id{};
    Status status;
  };
  std::mutex mu_;
  std::map<int, Known> known_;
  IpcMappings mappings_{{open_on, close_on}, kKeptOpen};
};

} // namespace

namespace {
CudaIpc& cuda_ipc() {
  static auto* calls = new CudaIpc;  // never destroyed: its mappings are closed by release_all
  return *calls;
}
} // namespace

IpcCalls* real_ipc_calls() { return &cuda_ipc(); }
std::size_t release_ipc_mappings() { return cuda_ipc().release_idle(); }
std::size_t ipc_mappings_kept() { return cuda_ipc().mapped(); }

} // namespace chorus::gpu
