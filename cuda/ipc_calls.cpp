#include "cuda/ipc_calls.hpp"

#include <atomic>

namespace chorus::gpu {

namespace {
std::atomic<IpcCalls*> g_ipc_double{nullptr};
} // namespace

IpcCalls* ipc_calls() {
  if (IpcCalls* d = g_ipc_double.load(std::memory_order_acquire)) return d;
  return real_ipc_calls();
}

void set_ipc_calls(IpcCalls* calls) { g_ipc_double.store(calls, std::memory_order_release); }

} // namespace chorus::gpu
