// A test double of the CUDA stream calls (cuda/stream_calls.hpp), for machines without a GPU: a
// "stream" is a FakeStream whose earlier work the test finishes by hand; an op's start line is
// that work being done and, as on a GPU, every op enqueued on the stream before it let go on (its
// start event follows their waits); the word the stream waits for is a host word the test reads. Each
// release is recorded, with what the test's hook saw at that moment (the work queued after the op
// sees exactly that).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "cuda/stream_calls.hpp"

namespace chorus::fake {

class FakeStream {
 public:
  // Work queued on the stream before the next ops is still running until finish_earlier_work().
  void hold_earlier_work();
  void finish_earlier_work();
  // True once `n` ops wait at their start line on this stream (within `at_most`).
  bool wait_until_waiting(int n, std::chrono::milliseconds at_most);
  // Called at each release, before the stream goes on (what later work would see).
  void on_release(std::function<void()> fn);
  std::vector<uint32_t> released() const;  // the targets the stream was let past, in order
  int marks() const;                       // ops enqueued on it

 private:
  friend class FakeStreams;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool earlier_done_ = true;
  int waiting_ = 0;
  int marks_ = 0;
  uint32_t next_target_ = 0;
  std::vector<uint32_t> released_;
  std::set<uint32_t> released_set_;
  std::function<void()> on_release_;
};

class FakeStreams final : public gpu::StreamCalls {
 public:
  Status enqueue(void* stream, gpu::StreamMark& m) override;
  Status wait_started(const gpu::StreamMark& m, Clock::time_point deadline) override;
  void release(gpu::StreamMark& m) override;
  void fail_enqueues_with(Status s);  // ok: none

 private:
  std::mutex mu_;
  Status fail_;
  std::vector<std::unique_ptr<uint32_t>> words_;
};

// Puts a FakeStreams in place for a scope.
struct StreamsDoubleInPlace {
  FakeStreams calls;
  StreamsDoubleInPlace() { gpu::set_stream_calls(&calls); }
  ~StreamsDoubleInPlace() { gpu::set_stream_calls(nullptr); }
};

} // namespace chorus::fake
