// Ordering an op within a caller's CUDA stream (OpOptions::stream), as NCCL does: the op starts
// after the work already queued on the stream, and work queued after the call waits for the op,
// without the calling thread waiting for either. At the call, enqueue() records an event on the
// stream (the op's start line) and makes the stream wait for a word of host memory the GPU can read
// to reach a target (cuStreamWaitValue32); the op's lane waits for the event (wait_started), runs
// the op, and release() writes the target (whatever the op's outcome, so the stream never waits
// for ever). The CUDA calls sit behind this seam (streams_real.cpp; a double in tests/) so the
// ordering is tested where no GPU is. Unlike the rest of cuda/, these run on the caller's and the
// lane's threads, not a device actor: they only record, wait for and query events and words.
#pragma once
#include <chrono>
#include <cstdint>

#include <chorus/status.hpp>

#include "core/wait.hpp"

namespace chorus::gpu {

// What enqueue() put on a stream for one op.
struct StreamMark {
  void* stream = nullptr;
  void* event = nullptr;       // recorded on the stream at the call
  uint32_t* word = nullptr;    // host word the stream waits for ...
  uint32_t target = 0;         // ... to reach this (a cyclic comparison, as CUDA's)
  int device = -1;             // the stream's GPU (whose event pool the event returns to)
};

class StreamCalls {
 public:
  virtual ~StreamCalls() = default;
  // Records the start line and the wait on `stream` (a cudaStream_t); errors name the call.
  virtual Status enqueue(void* stream, StreamMark& m) = 0;
  // Returns once the stream's work before the op is done, or the timeout at `deadline`.
  virtual Status wait_started(const StreamMark& m, Clock::time_point deadline) = 0;
  // Lets the stream go on past the op (the word reaches its target) and recycles the mark.
  virtual void release(StreamMark& m) = 0;
};

// The calls in force: a double put in place by set_stream_calls, else CUDA's (nullptr when chorus
// was built without CUDA).
StreamCalls* stream_calls();
void set_stream_calls(StreamCalls* calls);  // nullptr: CUDA's again
StreamCalls* real_stream_calls();
// CUDA's events and page of words for stream-ordered ops: released (the GPU layer's teardown)
// unless a mark is still out; kept() says whether any are held (only with CUDA).
bool release_stream_marks();
bool stream_marks_kept();

} // namespace chorus::gpu
