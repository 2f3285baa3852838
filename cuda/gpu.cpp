// gpu.hpp with CUDA: memory and copies through the device actors, and the plan executor.
#include "cuda/gpu.hpp"

#include <cuda_runtime.h>

#include <cstdio>
#include <algorithm>
#include <memory>
#include <stdexcept>
#include <vector>

#include "core/device_memory.hpp"
#include "cuda/copy_kernel.hpp"
#include "cuda/cuda_error.hpp"
#include "cuda/device_scope.hpp"
#include "cuda/device_worker.hpp"
#include "cuda/nccl_collective.hpp"
#include "cuda/reduce_kernel.hpp"

namespace chorus::gpu {

namespace {

// Thrown out of plan_collective by the scratch allocator: the plan cannot be built.
struct ScratchFailed {
  Status status;
};

// Bookkeeping work (allocation, copies for tensors) gets this long on the device actor.
Clock::time_point bookkeeping_deadline() { return Clock::now() + std::chrono::seconds(60); }

// A task stops itself at `deadline`; its caller waits a little longer so that the task's own
// answer (with the CUDA error or the timeout it saw) is what comes back.
Clock::time_point caller_deadline(Clock::time_point deadline) { return deadline + std::chrono::seconds(2); }

// The scratch memory of one task: held until the task ends, so that no work issued by the task
// can find it reused by anything but later work on the same stream.
using Held = std::vector<std::shared_ptr<std::byte>>;

// One reduction step on the worker's stream, always a single kernel (so f16/bf16 fold in f32 and
// round once whatever the fan-in): up to kMaxFan sources and destinations the pointers ride in the
// kernel's arguments, beyond that in a table copied to scratch first.
Status run_reduce(DeviceWorker& w, DType dtype, ReduceOp op, const DeviceReduce& r, Held& held) {
  const int nsrc = static_cast<int>(r.srcs.size()), ndst = static_cast<int>(r.dsts.size());
  if (nsrc <= kMaxFan && ndst <= kMaxFan)
    return launch_reduce(w.stream(), dtype, op, r.dsts.data(), ndst, r.srcs.data(), nsrc, r.count, r.divisor, nullptr,
                         r.block_stride);
  std::vector<const void*> table(r.srcs);
  table.insert(table.end(), r.dsts.begin(), r.dsts.end());
  const std::size_t bytes = table.size() * sizeof(void*);
  Status err;
  void* dev_table = held.emplace_back(w.scratch(bytes, err)).get();
  if (!dev_table) return err;
  // From pageable memory: the call returns once `table` is staged, so it may go out of scope.
  if (auto e = cudaMemcpyAsync(dev_table, table.data(), bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(w.stream()));
      e != cudaSuccess)
    return cuda_error("copying the reduction's pointer table", e);
  return launch_reduce(w.stream(), dtype, op, r.dsts.data(), ndst, r.srcs.data(), nsrc, r.count, r.divisor, dev_table,
                       r.block_stride);
}

// Issues every step of `plan` on w's stream, in order; the first failure stops it.
Status issue_plan(DeviceWorker& w, const DeviceCollective& op, const DevicePlan& plan, Held& held) {
  auto s = static_cast<cudaStream_t>(w.stream());
  for (const DeviceStep& st : plan.steps) {
    if (st.kind == DeviceStep::Kind::copy) {
      const DeviceCopy& k = st.copy;
      cudaError_t e = k.dst_device == k.src_device
                          ? cudaMemcpyAsync(k.dst, k.src, k.bytes, cudaMemcpyDefault, s)
                          : cudaMemcpyPeerAsync(k.dst, k.dst_device, k.src, k.src_device, k.bytes, s);
      if (e != cudaSuccess)
        return cuda_error("copy of " + std::to_string(k.bytes) + " bytes from cuda:" + std::to_string(k.src_device) +
                              " to cuda:" + std::to_string(k.dst_device),
                          e);
    } else if (st.kind == DeviceStep::Kind::copies) {
      if (Status r = launch_copies(s, st.copies.copies); !r.is_ok()) return r;
    } else if (Status r = run_reduce(w, op.dtype, op.redop, st.reduce, held); !r.is_ok()) {
      return r;
    }
  }
  return Status::ok();
}

Status run_plan(const DeviceCollective& c, Clock::time_point deadline) {
  Status error;
  DeviceWorker* w = DeviceWorker::find(lead_device(c), error);
  if (!w) return in_context(c.label, error);
  auto op = std::make_shared<DeviceCollective>(c);  // the task owns its description
  return w->call(
      [w, op, deadline]() -> Status {
        Held held;
        DevicePlan plan;
        try {
          plan = plan_collective(*op, [&](int, std::size_t bytes) {
            Status e;
            void* p = held.emplace_back(w->scratch(bytes, e)).get();
            if (!p) throw ScratchFailed{e};
            return p;
          });
        } catch (const ScratchFailed& f) {
          return in_context(op->label, f.status);
        }
        Status issued = issue_plan(*w, *op, plan, held);
        // What was issued finishes before the caller hears of a failure.
        Status drained = w->synchronize(deadline);
        return in_context(op->label, issued.is_ok() ? drained : issued);
      },
      caller_deadline(deadline), c.label);
}

} // namespace

bool built_with_cuda() { return true; }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

std::string device_name(int device) {
  cudaDeviceProp p{};
  cudaError_t e = cudaGetDeviceProperties(&p, device);
  if (e != cudaSuccess) return cuda_error("cuda:" + std::to_string(device), e).message();
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s (sm_%d%d, %.1f GiB)", p.name, p.major, p.minor,
                static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024 * 1024));
  return buf;
}

Status allocate(int device, std::size_t bytes, void** out) {
  *out = nullptr;
  Status error;
  DeviceWorker* w = DeviceWorker::find(device, error);
  if (!w) return error;
  // The task owns where it writes: a caller that timed out must not be written into later.
  auto p = std::make_shared<void*>(nullptr);
  error = w->call([p, bytes, device]() -> Status {
    if (auto e = cudaMalloc(p.get(), bytes ? bytes : 1); e != cudaSuccess)
      return cuda_error("cudaMalloc of " + std::to_string(bytes) + " bytes on cuda:" + std::to_string(device), e);
    return Status::ok();
  });
  if (error.is_ok()) *out = *p;
  return error;
}

void release(int device, void* p) noexcept {
  if (!p) return;
  try {
    // Queued without waiting: a tensor's destructor must not block behind long device work, and
    // cudaFree orders itself after the work already issued.
    if (DeviceWorker* w = DeviceWorker::running(device)) {
      w->submit([p]() -> Status {
        cudaFree(p);
        return Status::ok();
      });
      return;
    }
    // No device actor runs (the GPU layer was released, or never used this GPU): no work of
    // ours is in flight, and a thread started only to free would outlive the call. Here, on the
    // caller's thread, whose current device is left as it was.
    DeviceScope scope(device);
    cudaFree(p);
    (void)cudaGetLastError();  // "driver shutting down" at exit, say: nothing to do about it
  } catch (...) {  // a destructor's path: never throw (at worst the memory stays allocated)
  }
}

Status allocate_pinned(std::size_t bytes, void** out) {
  *out = nullptr;
  if (auto e = cudaMallocHost(out, bytes ? bytes : 1); e != cudaSuccess) {
    *out = nullptr;
    return cuda_error("cudaMallocHost of " + std::to_string(bytes) + " bytes", e);
  }
  return Status::ok();
}

void release_pinned(void* p) noexcept {
  if (p) cudaFreeHost(p);
}

namespace {

// Issues work on `device`'s stream through its actor and waits for it to finish there.
template <class Issue>
Status issue_and_wait(int device, const std::string& what, Issue issue) {
  Status error;
  DeviceWorker* w = DeviceWorker::find(device, error);
  if (!w) return error;
  const auto deadline = bookkeeping_deadline();
  return w->call(
      [=]() -> Status {
        if (Status e = issue(static_cast<cudaStream_t>(w->stream())); !e.is_ok()) return e;
        return in_context(what, w->synchronize(deadline));
      },
      caller_deadline(deadline), what);
}

} // namespace

Status copy(void* dst, int dst_device, const void* src, int src_device, std::size_t bytes) {
  if (bytes == 0) return Status::ok();
  const int device = dst_device != kHost ? dst_device : src_device;
  if (device == kHost) return {Errc::invalid_argument, "gpu::copy: neither side is a device"};
  const std::string what = "copy of " + std::to_string(bytes) + " bytes";
  return issue_and_wait(device, what, [=](cudaStream_t s) -> Status {
    cudaError_t e = dst_device != kHost && src_device != kHost && dst_device != src_device
                        ? cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, s)
                        : cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s);
    return e == cudaSuccess ? Status::ok() : cuda_error(what, e);
  });
}

Status memset_zero(int device, void* p, std::size_t bytes) {
  return issue_and_wait(device, "cudaMemset", [=](cudaStream_t s) -> Status {
    cudaError_t e = cudaMemsetAsync(p, 0, bytes, s);
    return e == cudaSuccess ? Status::ok() : cuda_error("cudaMemset", e);
  });
}

Status accumulate(int device, DType dtype, void* dst, const void* src, std::size_t count) {
  return issue_and_wait(device, "accumulate", [=](cudaStream_t s) {
    void* dsts[1] = {dst};
    const void* srcs[2] = {dst, src};
    return launch_reduce(s, dtype, ReduceOp::sum, dsts, 1, srcs, 2, count, 1);
  });
}

Result<double> copy_bandwidth(int device, std::size_t bytes) {
  Status error;
  DeviceWorker* w = DeviceWorker::find(device, error);
  if (!w) return error;
  auto result = std::make_shared<double>(0);  // the task owns where it writes
  error = w->call([w, bytes, result]() -> Status {
    void *a = nullptr, *b = nullptr;
    cudaEvent_t t0 = nullptr, t1 = nullptr;
    auto s = static_cast<cudaStream_t>(w->stream());
    Status err;
    if (auto e = cudaMalloc(&a, bytes); e != cudaSuccess) err = cuda_error("cudaMalloc", e);
    else if (auto e2 = cudaMalloc(&b, bytes); e2 != cudaSuccess) err = cuda_error("cudaMalloc", e2);
    if (err.is_ok()) {
      cudaEventCreate(&t0);
      cudaEventCreate(&t1);
      constexpr int reps = 20;
      cudaMemsetAsync(a, 1, bytes, s);
      for (int i = 0; i < 3; ++i) cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s);  // warm up
      cudaEventRecord(t0, s);
      for (int i = 0; i < reps; ++i) cudaMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, bytes, cudaMemcpyDeviceToDevice, s);
      cudaEventRecord(t1, s);
      if (auto e = cudaEventSynchronize(t1); e != cudaSuccess) err = cuda_error("copy bandwidth", e);
      float ms = 0;
      if (err.is_ok() && cudaEventElapsedTime(&ms, t0, t1) == cudaSuccess && ms > 0)
        *result = static_cast<double>(bytes) * reps / (ms * 1e-3) / 1e9;
      cudaEventDestroy(t0);
      cudaEventDestroy(t1);
    }
    cudaFree(a);
    cudaFree(b);
    return err;
  });
  if (!error.is_ok()) return error;
  return *result;
}

Status run_collective(const DeviceCollective& c, Clock::time_point deadline) {
  if (c.kind == OpKind::barrier || c.peers.empty()) return Status::ok();
  try {
    if (c.use_nccl) return run_nccl(c, deadline);
    return run_plan(c, deadline);
  } catch (const std::exception& e) {  // a device that does not exist, or no memory for the bookkeeping
    return device_error(c.label + ": " + e.what());
  }
}

} // namespace chorus::gpu

namespace chorus::gpu {
namespace {

// Tensors (core/) reach GPU memory through this table.
class CudaMemory final : public DeviceMemory {
 public:
  Status allocate(int device, std::size_t bytes, void** out) override { return gpu::allocate(device, bytes, out); }
  void release(int device, void* p) noexcept override { gpu::release(device, p); }
  Status copy(void* dst, int dst_device, const void* src, int src_device, std::size_t bytes) override {
    return gpu::copy(dst, dst_device, src, src_device, bytes);
  }
  Status memset_zero(int device, void* p, std::size_t bytes) override { return gpu::memset_zero(device, p, bytes); }
};

CudaMemory cuda_memory;
const bool installed = (install_device_memory(&cuda_memory), true);

} // namespace
} // namespace chorus::gpu

// Named by the link options of chorus_cuda (cuda/CMakeLists.txt), so that this file, and with it
// the installation above, is part of every program that links the GPU layer.
extern "C" const int chorus_cuda_layer = 1;
