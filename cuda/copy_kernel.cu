#include "cuda/copy_kernel.hpp"

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/cuda_error.hpp"

namespace chorus::gpu {

namespace {

struct Item {
  unsigned char* dst;
  const unsigned char* src;
  std::size_t bytes;
};
// The copies ride in the kernel's arguments (64 x 24 bytes, under the 4 KiB limit).
struct Table {
  Item item[kMaxBatchedCopies];
};

// Copy blockIdx.y, its bytes spread over the x blocks.
__global__ void copies_kernel(Table t) {
  const Item c = t.item[blockIdx.y];
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const auto ends = reinterpret_cast<std::uintptr_t>(c.dst) | reinterpret_cast<std::uintptr_t>(c.src);
  std::size_t done = 0;
  if (ends % 16 == 0) {
    const std::size_t words = c.bytes / 16;
    for (std::size_t i = first; i < words; i += stride)
      reinterpret_cast<uint4*>(c.dst)[i] = reinterpret_cast<const uint4*>(c.src)[i];
    done = words * 16;
  } else if (ends % 4 == 0) {
    const std::size_t words = c.bytes / 4;
    for (std::size_t i = first; i < words; i += stride)
      reinterpret_cast<uint32_t*>(c.dst)[i] = reinterpret_cast<const uint32_t*>(c.src)[i];
    done = words * 4;
  }
  for (std::size_t i = done + first; i < c.bytes; i += stride) c.dst[i] = c.src[i];
}

} // namespace

Status launch_copies(void* stream, const std::vector<DeviceCopy>& copies) {
  if (copies.empty()) return Status::ok();
  if (copies.size() > static_cast<std::size_t>(kMaxBatchedCopies))
    return {Errc::internal, "copy kernel: " + std::to_string(copies.size()) + " copies (at most " +
                                std::to_string(kMaxBatchedCopies) + ")"};
  Table t{};
  std::size_t largest = 0;
  for (std::size_t k = 0; k < copies.size(); ++k) {
    t.item[k] = {static_cast<unsigned char*>(copies[k].dst), static_cast<const unsigned char*>(copies[k].src),
                 copies[k].bytes};
    largest = copies[k].bytes > largest ? copies[k].bytes : largest;
  }
  constexpr int threads = 256;
  // Enough blocks for a 16-byte word a thread of the largest copy, at most 1024 a copy.
  std::size_t blocks = (largest / 16 + threads - 1) / threads;
  blocks = blocks < 1 ? 1 : (blocks > 1024 ? 1024 : blocks);
  (void)cudaGetLastError();  // only this launch's error counts below
  copies_kernel<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(copies.size())), threads, 0,
                  static_cast<cudaStream_t>(stream)>>>(t);
  if (auto e = cudaGetLastError(); e != cudaSuccess) return cuda_error("copy kernel launch", e);
  return Status::ok();
}

Status preload_copy_kernel() {
  cudaFuncAttributes attr{};
  if (cudaError_t e = cudaFuncGetAttributes(&attr, copies_kernel); e != cudaSuccess)
    return cuda_error("loading the copy kernel", e);
  return Status::ok();
}

} // namespace chorus::gpu
