// The seam between the GPU arena (runtime/peer/gpu_arena_path.hpp) and CUDA's interprocess memory:
// node processes of one host whose tensors lie on one GPU hand each other their buffers as CUDA
// IPC handles, and one of them (the op's lead) runs the op's fused plan (cuda/device_plan.hpp)
// over every process's buffers, as for logical peers of one process. ipc_calls() is CUDA
// (cuda/ipc_calls_real.cpp); the tests put a double in its place (tests/fake_ipc.hpp) that plays
// the handles and the plan on host memory, so the arena's protocol runs on a machine without a GPU.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include <chorus/status.hpp>

#include "core/wait.hpp"
#include "cuda/device_plan.hpp"
#include "cuda/ipc_mappings.hpp"

namespace chorus::gpu {

using GpuUuid = std::array<unsigned char, 16>;      // the GPU as every process names it

// A buffer as another process opens it: the handle of the allocation that holds it, and where in
// that allocation it starts.
struct IpcBuffer {
  IpcHandle handle{};
  uint64_t offset = 0;
};

class IpcCalls {
 public:
  virtual ~IpcCalls() = default;
  virtual std::string name() const = 0;
  // The GPU behind this process's device index `device`.
  virtual Status identify(int device, GpuUuid& id) = 0;
  // The handle of the allocation on `device` that holds `p`.
  virtual Status export_buffer(int device, const void* p, IpcBuffer& b) = 0;
  // Where another process's exported buffer lies in this one, on `device` (the same GPU). Opened
  // once per allocation and kept (cuda/ipc_mappings.hpp): a later op on the same buffers costs a
  // lookup. Held until release_buffer: the op that opened it calls that once it has run.
  virtual Status open_buffer(int device, const IpcBuffer& b, void** p) = 0;
  virtual void release_buffer(int device, const IpcBuffer& b) = 0;
  // Runs `c` (every buffer now addressable here) as the plan of cuda/device_plan.hpp, by the
  // lead's device actor; returns once every result is in place, at the latest at `deadline`.
  virtual Status run(const DeviceCollective& c, Clock::time_point deadline) = 0;
};

// CUDA's, or the double a test put in its place; nullptr without CUDA and no double.
IpcCalls* ipc_calls();
// Tests: `calls` plays CUDA IPC from now on; nullptr gives CUDA back.
void set_ipc_calls(IpcCalls* calls);
// CUDA itself (cuda/ipc_calls_real.cpp), or nullptr without CUDA (cuda/no_cuda.cpp).
IpcCalls* real_ipc_calls();
// CUDA's mappings of other processes' buffers: closes those no op holds (the GPU layer's
// teardown), and counts those open (only with CUDA).
std::size_t release_ipc_mappings();
std::size_t ipc_mappings_kept();

} // namespace chorus::gpu
