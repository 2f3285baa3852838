#include "cuda/stream_calls.hpp"

#include <atomic>

namespace chorus::gpu {

namespace {
std::atomic<StreamCalls*> g_stream_double{nullptr};
} // namespace

StreamCalls* stream_calls() {
  if (StreamCalls* d = g_stream_double.load(std::memory_order_acquire)) return d;
  return real_stream_calls();
}

void set_stream_calls(StreamCalls* calls) { g_stream_double.store(calls, std::memory_order_release); }

} // namespace chorus::gpu
