// What the rest of chorus may ask of GPUs, without a CUDA header (chorus/gpu.hpp is the part a host
// app sees). Implemented in cuda/*.cpp/.cu when chorus
// is built with CUDA, and by cuda/no_cuda.cpp otherwise (no devices; every request is an error that
// says chorus was built without CUDA). Every CUDA call for GPU d runs on d's device actor (one
// thread per GPU per process, cuda/device_worker.hpp); these functions hand it the work and wait.
// Failures are a Status (cuda/device_status.hpp): device_error with CUDA's or NCCL's text, the
// device and the op; timeout for a deadline; invalid_argument for a request that makes no sense.
#pragma once
#include <chrono>
#include <cstddef>

#include <chorus/gpu.hpp>
#include <chorus/result.hpp>
#include <chorus/status.hpp>

#include "cuda/device_plan.hpp"

namespace chorus::gpu {

// Device memory (cudaMalloc on the device's actor). release() of nullptr is a no-op.
Status allocate(int device, std::size_t bytes, void** out);
void release(int device, void* p) noexcept;
// Page-locked host memory for staging (cudaMallocHost).
Status allocate_pinned(std::size_t bytes, void** out);
void release_pinned(void* p) noexcept;
// Synchronous copy between host (device = kHost) and device memory, or between two GPUs.
inline constexpr int kHost = -1;
Status copy(void* dst, int dst_device, const void* src, int src_device, std::size_t bytes);
Status memset_zero(int device, void* p, std::size_t bytes);
// dst[i] += src[i] for i < count, on `device` (both pointers there; f16/bf16 summed in f32).
Status accumulate(int device, DType dtype, void* dst, const void* src, std::size_t count);

// The device-to-device copy bandwidth of `device` (bytes copied per second, in GB/s) for copies of
// `bytes` within its memory: the yardstick of the memory-bound ideal (a copy reads and writes each
// byte once).
Result<double> copy_bandwidth(int device, std::size_t bytes);

// Runs one collective over device buffers: through NCCL when `c.use_nccl` (the planner's choice,
// which make_device_run sets only where nccl_supports(c): every peer a distinct GPU), else the
// plan of device_plan.hpp on the lead device's actor. Returns when every result is in place
// (streams synchronized) or with the error, at the latest at `deadline`; a NCCL op that outlives
// it is aborted (its communicator is torn down and rebuilt by the next op).
Status run_collective(const DeviceCollective& c, std::chrono::steady_clock::time_point deadline);

// Whether NCCL can serve this op (dtype and reduce op supported, peers on distinct GPUs).
bool nccl_supports(const DeviceCollective& c);

// The GPU layer's teardown (cuda/teardown.cpp): releases what it keeps between ops (NCCL
// communicators, mappings of other processes' buffers, the stream-ordered ops' events and words,
// idle pinned staging buffers, and each device actor's stream, scratch memory and thread), so that
// nothing of ours touches CUDA after its runtime unloads. Called when the last Runtime ends and
// at exit (an atexit handler registered after CUDA's own); whatever is used later is made again.
// False when something was still in use at `deadline` (it is left as it is).
bool release_all(std::chrono::steady_clock::time_point deadline) noexcept;
// What the GPU layer keeps now (the teardown's tests).
struct Kept {
  std::size_t device_actors = 0;  // device actor threads running
  std::size_t nccl_sets = 0;      // GPU sets with NCCL communicators
  std::size_t ipc_mappings = 0;   // other processes' buffers mapped
  std::size_t staging_bytes = 0;  // idle pinned staging memory
  bool stream_marks = false;      // the stream-ordered ops' events or page of words
};
Kept kept();

} // namespace chorus::gpu
