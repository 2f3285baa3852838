#include "cuda/nccl_calls.hpp"

#include <atomic>

namespace chorus::gpu {

namespace {
std::atomic<NcclCalls*> g_nccl_double{nullptr};
} // namespace

NcclCalls* nccl_calls() {
  if (NcclCalls* d = g_nccl_double.load(std::memory_order_acquire)) return d;
  return real_nccl_calls();
}

void set_nccl_calls(NcclCalls* calls) { g_nccl_double.store(calls, std::memory_order_release); }

} // namespace chorus::gpu
