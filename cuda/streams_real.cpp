// The CUDA side of stream_calls.hpp and user_streams.hpp. The stream waits on a word of pinned,
// mapped host memory with cuStreamWaitValue32 (the driver's, found by cudaGetDriverEntryPoint so
// that libcuda is not linked); the op's lane looks at the event as the device actors look at
// theirs (spin, then naps).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cuda/cuda_error.hpp"
#include "cuda/device_scope.hpp"
#include "cuda/device_worker.hpp"
#include "cuda/driver_entry.hpp"
#include "cuda/poll.hpp"
#include "cuda/stream_calls.hpp"
#include "cuda/user_streams.hpp"

namespace chorus::gpu {

namespace {

constexpr PollPace kStartPace{std::chrono::microseconds(2000), std::chrono::microseconds(20)};
// The words of every stream-ordered op in flight in the process, allocated once, at the first:
// allocating pinned memory later would wait for the GPU, whose streams may be waiting for words
// that only the ops behind that allocation would release (it hung so on an H100).
constexpr std::size_t kWords = 1 << 16;

class CudaStreams final : public StreamCalls {
 public:
  Status enqueue(void* stream, StreamMark& m) override {
    auto s = static_cast<cudaStream_t>(stream);
    int device = -1;
    if (cudaError_t e = cudaStreamGetDevice(s, &device); e != cudaSuccess)
      return cuda_error("OpOptions::stream: cudaStreamGetDevice (not a CUDA stream?)", e);
    if (!wait_value()) return device_error("OpOptions::stream: cuStreamWaitValue32 not found in the CUDA driver");
    if (Status st = started(device); !st.is_ok()) return st;
    cudaEvent_t ev = nullptr;
    uint32_t* word = nullptr;
    if (Status st = take(device, ev, word); !st.is_ok()) return st;
    m = StreamMark{stream, ev, word, std::atomic_ref<uint32_t>(*word).load(std::memory_order_acquire) + 1, device};
    if (cudaError_t e = cudaEventRecord(ev, s); e != cudaSuccess) {
      give_back(m);
      return cuda_error("OpOptions::stream: cudaEventRecord", e);
    }
    if (CUresult r = wait_value()(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(word), m.target,
                                  CU_STREAM_WAIT_VALUE_GEQ);
        r != CUDA_SUCCESS) {
      give_back(m);
      return device_error("OpOptions::stream: cuStreamWaitValue32: CUDA driver error " + std::to_string(int(r)));
    }
    return Status::ok();
  }

  Status wait_started(const StreamMark& m, Clock::time_point deadline) override {
    auto ev = static_cast<cudaEvent_t>(m.event);
    cudaError_t last = cudaSuccess;
    auto reached = [&] {
      last = cudaEventQuery(ev);
      return last != cudaErrorNotReady;
    };
    Status st = poll_until(reached, [] { return Status::ok(); }, deadline, kStartPace,
                           "the work queued on OpOptions::stream before the op did not finish in time");
    (void)cudaGetLastError();  // "not ready" stays behind as the thread's last error
    if (st.is_ok() && last != cudaSuccess) return cuda_error("OpOptions::stream: the work queued before the op", last);
    return st;
  }

  void release(StreamMark& m) override {
    std::atomic_ref<uint32_t>(*m.word).store(m.target, std::memory_order_release);
    give_back(m);
  }

 private:
  static PFN_cuStreamWaitValue32_v11070 wait_value() {
    static const auto fn = driver_function<PFN_cuStreamWaitValue32_v11070>("cuStreamWaitValue32", 12000);
    return fn;
  }

  // The device's actor is up (its stream made, chorus's kernels loaded) before the stream first
  // waits for an op: starting it later, while a stream waits, would wait for the GPU in turn
  // (tensors borrowed from a framework never started it).
  Status started(int device) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (started_.count(device)) return Status::ok();
    }
    Status error;
    DeviceWorker* w = DeviceWorker::find(device, error);
    if (!w) return error;
    if (Status st = w->call([] { return Status::ok(); }); !st.is_ok()) return in_context("OpOptions::stream", st);
    std::lock_guard<std::mutex> lk(mu_);
    started_.insert(device);
    return Status::ok();
  }

  Status take(int device, cudaEvent_t& ev, uint32_t*& word) {
    std::lock_guard<std::mutex> lk(mu_);
    auto& events = events_[device];
    if (events.empty()) {
      DeviceScope scope(device);
      cudaEvent_t e = nullptr;
      if (cudaError_t r = cudaEventCreateWithFlags(&e, cudaEventDisableTiming); r != cudaSuccess)
        return cuda_error("OpOptions::stream: cudaEventCreate", r);
      events.push_back(e);
    }
    if (!page_) {
      // Pinned, mapped and portable: every GPU reads it at its host address (unified addressing).
      void* page = nullptr;
      if (cudaError_t r = cudaHostAlloc(&page, kWords * sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable);
          r != cudaSuccess)
        return cuda_error("OpOptions::stream: cudaHostAlloc of the stream words", r);
      page_ = static_cast<uint32_t*>(page);
      words_.reserve(kWords);
      for (std::size_t i = kWords; i-- > 0;) {
        page_[i] = 0;
        words_.push_back(page_ + i);
      }
    }
    if (words_.empty())
      return device_error("OpOptions::stream: " + std::to_string(kWords) + " stream-ordered ops are in flight already");
    ev = events.back();
    events.pop_back();
    word = words_.back();
    words_.pop_back();
    return Status::ok();
  }

  // A word goes back at once: a later target is the old one plus one, and the stream's earlier
  // wait (for the old target) passes as well, as it should. An event goes back once released
  // (a record later on re-arms it).
  void give_back(StreamMark& m) {
    std::lock_guard<std::mutex> lk(mu_);
    auto ev = static_cast<cudaEvent_t>(m.event);
    events_[m.device].push_back(ev);
    words_.push_back(m.word);
    m = StreamMark{};
  }

 public:
  // The GPU layer's teardown: the events and the page of words go, unless a mark is still out.
  bool release() {
    std::lock_guard<std::mutex> lk(mu_);
    if (page_ && words_.size() != kWords) return false;
    for (auto& [device, events] : events_) {
      DeviceScope scope(device);
      for (cudaEvent_t e : events) cudaEventDestroy(e);
    }
    events_.clear();
    started_.clear();  // a device actor started again preloads its kernels again
    if (page_) cudaFreeHost(page_);
    page_ = nullptr;
    words_.clear();
    (void)cudaGetLastError();
    return true;
  }
  bool kept() {
    std::lock_guard<std::mutex> lk(mu_);
    return page_ != nullptr || !events_.empty();
  }

 private:
  std::mutex mu_;
  std::map<int, std::vector<cudaEvent_t>> events_;
  std::set<int> started_;
  uint32_t* page_ = nullptr;
  std::vector<uint32_t*> words_;
};

} // namespace

namespace {
CudaStreams& cuda_streams() {
  static auto* calls = new CudaStreams;  // never destroyed: lanes may release marks during exit
  return *calls;
}
} // namespace

StreamCalls* real_stream_calls() { return &cuda_streams(); }
bool release_stream_marks() { return cuda_streams().release(); }
bool stream_marks_kept() { return cuda_streams().kept(); }

Result<void*> make_stream(int device) {
  DeviceScope scope(device);
  cudaStream_t s = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); e != cudaSuccess)
    return cuda_error("cudaStreamCreate", e);
  return static_cast<void*>(s);
}

void destroy_stream(void* stream) noexcept {
  if (stream) cudaStreamDestroy(static_cast<cudaStream_t>(stream));
}

Status copy_on_stream(void* dst, const void* src, std::size_t bytes, void* stream) {
  if (cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream));
      e != cudaSuccess)
    return cuda_error("cudaMemcpyAsync", e);
  return Status::ok();
}

Status synchronize_stream(void* stream) {
  if (cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(stream)); e != cudaSuccess)
    return cuda_error("cudaStreamSynchronize", e);
  return Status::ok();
}

} // namespace chorus::gpu
