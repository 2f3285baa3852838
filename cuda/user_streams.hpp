// What a user's CUDA code would do around a stream-ordered op, for the programs of this repo that
// play that part without including CUDA (the GPU tests, the benches): make a stream, queue copies
// on it, wait for it. Without CUDA every call is a device_error.
#pragma once
#include <cstddef>

#include <chorus/result.hpp>
#include <chorus/status.hpp>

namespace chorus::gpu {

// A non-blocking stream of `device` (cudaStreamCreateWithFlags); destroy_stream(nullptr) is a no-op.
Result<void*> make_stream(int device);
void destroy_stream(void* stream) noexcept;
// Queues a copy of `bytes` from `src` to `dst` (host or device memory, cudaMemcpyDefault).
Status copy_on_stream(void* dst, const void* src, std::size_t bytes, void* stream);
// Waits on this thread until the stream's work is done.
Status synchronize_stream(void* stream);

} // namespace chorus::gpu
