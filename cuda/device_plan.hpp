// How a collective over device buffers runs as a list of copies and fused reductions, all issued in
// order on one device (the lead: the root's GPU, or rank 0's). Plain C++ with no CUDA: the GPU
// executor (cuda/gpu.cpp) runs the steps with cudaMemcpy*Async and the reduction kernel, and the
// unit tests run the very same plans on host memory, so every op's plan is checked without a GPU.
//
// With every peer on one GPU (logical peers) an all-reduce is a single kernel that reads each
// input once and writes each output once: the memory-bound minimum. Peers on other GPUs are
// reached with peer copies (through host memory where the hardware has no peer access): their
// inputs are copied to scratch on the lead device, reduced there, and the result copied back.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include <chorus/types.hpp>

#include "core/op_desc.hpp"

namespace chorus::gpu {

struct DevicePeerBuffers {
  int device = 0;
  const void* in = nullptr;  // may equal out (in place); null where the op reads nothing here
  void* out = nullptr;       // null where the op writes nothing here
};

// An op over every peer's GPU buffers (send/recv run as a two-peer broadcast from rank 0).
struct DeviceCollective : OpDesc {
  std::vector<DevicePeerBuffers> peers;  // by rank
  bool use_nccl = false;
  std::string label;  // "all_reduce #3", for messages
};

// dst = src, bytes long; either side may be on any device.
struct DeviceCopy {
  void* dst;
  int dst_device;
  const void* src;
  int src_device;
  std::size_t bytes;
};
// Every dsts[k][i] = (srcs[0][i] op srcs[1][i] op ...) / divisor, all on `device`; f16/bf16 fold in
// f32 and round once. A dst may be one of the srcs (elementwise in place). With a block_stride
// (bytes), a reduce-scatter in one pass: dsts[y][i] = (srcs[0] + y*block_stride)[i] op ... for each
// y (one kernel for every block instead of one a block).
struct DeviceReduce {
  int device;
  std::vector<void*> dsts;
  std::vector<const void*> srcs;
  std::size_t count;
  std::size_t divisor;  // 1: none (avg divides by the peer count)
  std::size_t block_stride = 0;
};
// Copies within the lead device that may run in any order, at once: none reads or writes bytes
// another of them writes. One kernel runs them all (a launch per small copy cost an all_gather of
// 4 peers on one H200 ~5 us a copy, 126 us at 1 KiB).
struct DeviceCopies {
  int device;
  std::vector<DeviceCopy> copies;
};
struct DeviceStep {
  enum class Kind { copy, reduce, copies } kind;
  DeviceCopy copy{};
  DeviceReduce reduce{};
  DeviceCopies copies{};
};
struct DevicePlan {
  int lead = 0;
  std::vector<DeviceStep> steps;
};

// Copies up to this size join a batch (larger ones run as the copy engine's own, which moves bytes
// faster than a kernel), up to this many a batch (the kernel's argument table).
inline constexpr std::size_t kBatchedCopyBytes = std::size_t{4} << 20;
inline constexpr int kMaxBatchedCopies = 64;

// Scratch memory on the lead device (the only device a plan asks for), valid until the plan has run.
using ScratchFn = std::function<void*(int device, std::size_t bytes)>;

// The device whose actor runs the plan: the root's for rooted ops, else rank 0's.
int lead_device(const DeviceCollective& c);

DevicePlan plan_collective(const DeviceCollective& c, const ScratchFn& scratch);

// `steps` with every run of consecutive small copies within `device` that no order binds (above)
// as one copies step; a run of one stays a copy. plan_collective's plans come out of it.
std::vector<DeviceStep> batch_copies(std::vector<DeviceStep> steps, int device);

// Bytes of input and output each rank of `c` touches (what the op needs from the caller).
std::size_t input_bytes(const DeviceCollective& c, int rank);
std::size_t output_bytes(const DeviceCollective& c, int rank);

} // namespace chorus::gpu
