// The on-device reduction: every dsts[k][i] = (srcs[0][i] op srcs[1][i] op ...) / divisor for
// i < count, one grid-stride kernel with 16-byte vector loads where every pointer allows them.
// f16/bf16 fold in f32 and round to nearest even once; integers wrap (sum/prod computed unsigned)
// and divide truncating toward zero; float min/max propagate NaN (as the host kernels do).
// Host-callable from the device actor's thread; no CUDA header.
#pragma once
#include <cstddef>
#include <chorus/status.hpp>
#include <chorus/types.hpp>

namespace chorus::gpu {

// Sources and destinations per launch: one pass for up to 64 logical peers (the kernel's
// arguments, 1 KiB of pointers, stay far below the 4 KiB parameter limit).
inline constexpr int kMaxFan = 64;

// Launches on `stream` (a cudaStream_t of the current device). nsrc, ndst >= 1; a dst may equal a
// src. With `block_stride` (bytes), dsts[y] gets block y of every source, srcs[k] + y*block_stride
// (a reduce-scatter's blocks in one launch). Up to kMaxFan of each the pointers travel in the kernel's arguments; beyond that the caller
// passes `device_table`: device memory holding srcs[0..nsrc) then dsts[0..ndst), already copied
// there on this stream (the host arrays are still needed for the alignment check). Returns the
// launch error (device_error), invalid_argument for an op the dtype does not have, or ok.
Status launch_reduce(void* stream, DType dtype, ReduceOp op, void* const* dsts, int ndst,
                          const void* const* srcs, int nsrc, std::size_t count, std::size_t divisor,
                          const void* device_table = nullptr, std::size_t block_stride = 0);

// Loads every form of the kernel on the current device now (CUDA would load each at its first
// launch, which waits for the whole GPU: see DeviceWorker::start).
Status preload_reduce_kernels();

} // namespace chorus::gpu
