#include "cuda/device_worker.hpp"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "core/log.hpp"
#include "cuda/copy_kernel.hpp"
#include "cuda/cuda_error.hpp"
#include "cuda/gpu.hpp"
#include "cuda/poll.hpp"
#include "cuda/reduce_kernel.hpp"

#ifdef __linux__
#include <sys/prctl.h>
#endif

namespace chorus::gpu {

namespace {
// An idle worker looks at its mailbox again this often (it sleeps on the mailbox's word between).
constexpr auto kIdleLook = std::chrono::seconds(1);
// Draining the stream: work of up to 2 ms (a 4-peer all_reduce of 512 MiB on an H200) finishes
// within the spin; longer work is looked at every nap. The spin is this GPU's own thread, as CUDA's
// default scheduling spins in cudaStreamSynchronize: with a 200 us spin and 50 us naps (which the
// kernel's 50 us timer slack made ~100), a 256 MiB all_reduce of 4 peers took 1.42x its memory-bound
// ideal while its kernel alone took 1.05x.
constexpr PollPace kStreamPace{std::chrono::microseconds(2000), std::chrono::microseconds(20)};

// Scratch memory for the BufferPool of a worker, allocated and freed on that worker's thread (the
// current device there is its GPU). CUDA's answer to the last allocation on this thread is kept
// for the message, since the pool only learns that there was no memory.
// It is allocated in the worker's stream (cudaMallocAsync), not with cudaMalloc, which CUDA allows
// to wait for the whole device (its "implicit synchronization"): a caller's stream may be waiting
// for the very op that needs the scratch (OpOptions::stream), and the op would never come.
thread_local cudaError_t tl_scratch_error = cudaSuccess;
thread_local cudaStream_t tl_worker_stream = nullptr;
void* allocate_scratch(std::size_t bytes) {
  void* p = nullptr;
  tl_scratch_error = cudaMallocAsync(&p, bytes, tl_worker_stream);
  if (tl_scratch_error == cudaSuccess) return p;
  (void)cudaGetLastError();
  return nullptr;
}
void release_scratch(void* p) { cudaFreeAsync(p, tl_worker_stream); }
// Scratch is kept for the worker's life, whatever its size: giving it back would cost a free and
// another allocation on the next op.
constexpr std::size_t kKeepAllScratch = SIZE_MAX / 2;
} // namespace

namespace {
// Never destroyed: a tensor freed during exit may still come here, and a caller may hold a worker.
std::mutex& workers_mu() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::map<int, DeviceWorker*>& workers() {
  static auto* w = new std::map<int, DeviceWorker*>;
  return *w;
}

// A program that exits with GPU work still kept (no Runtime was destroyed: tensors alone, or
// exit() with a Runtime alive) releases it here. Registered after CUDA's first call, so it runs
// before the CUDA runtime's own exit handlers unload it (handlers run in reverse order).
void release_at_exit() { (void)release_all(Clock::now() + std::chrono::seconds(2)); }
} // namespace

DeviceWorker& DeviceWorker::of(int device) {
  std::lock_guard<std::mutex> lk(workers_mu());
  auto it = workers().find(device);
  if (it != workers().end()) return *it->second;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    n = 0;
  }
  if (device < 0 || device >= n)
    throw std::out_of_range("cuda:" + std::to_string(device) + " does not exist (" + std::to_string(n) +
                            " CUDA device(s) here)");
  static const bool at_exit = (std::atexit(release_at_exit), true);
  (void)at_exit;
  auto* w = new DeviceWorker(device);
  workers()[device] = w;
  return *w;
}

DeviceWorker* DeviceWorker::find(int device, Status& error) {
  try {
    return &of(device);
  } catch (const std::exception& e) {
    error = device_error(e.what());
    return nullptr;
  }
}

DeviceWorker* DeviceWorker::running(int device) {
  DeviceWorker* w = nullptr;
  {
    std::lock_guard<std::mutex> lk(workers_mu());
    auto it = workers().find(device);
    if (it == workers().end()) return nullptr;
    w = it->second;
  }
  std::lock_guard<std::mutex> lk(w->life_mu_);
  return w->running_ ? w : nullptr;
}

std::size_t DeviceWorker::running_count() {
  std::vector<DeviceWorker*> all;
  {
    std::lock_guard<std::mutex> lk(workers_mu());
    for (auto& [d, w] : workers()) all.push_back(w);
  }
  std::size_t n = 0;
  for (DeviceWorker* w : all) {
    std::lock_guard<std::mutex> lk(w->life_mu_);
    n += w->running_;
  }
  return n;
}

bool DeviceWorker::stop_all(Clock::time_point deadline) {
  std::vector<std::pair<DeviceWorker*, uint32_t>> stopping;
  {
    std::lock_guard<std::mutex> lk(workers_mu());
    for (auto& [d, w] : workers()) stopping.emplace_back(w, 0);
  }
  for (auto& [w, ends] : stopping)
    if (!w->stop(ends)) w = nullptr;
  bool all = true;
  for (auto& [w, ends] : stopping)
    if (w && !w->ends_.wait_at_least(ends + 1, deadline)) {
      CHORUS_LOG(warn, cuda, LogWhere{}, "GPU " + std::to_string(w->device_) +
                                             ": device actor still busy at the GPU layer's teardown; left running");
      all = false;
    }
  return all;
}

bool DeviceWorker::stop(uint32_t& ends_before) {
  {
    std::lock_guard<std::mutex> lk(life_mu_);
    if (!running_) return false;
    ends_before = ends_.value.load(std::memory_order_acquire);
    stop_asked_.store(true, std::memory_order_release);
  }
  (void)queue_->submit([] { return Status::ok(); });  // wakes it: it ends once the queue is empty
  return true;
}

DeviceWorker::DeviceWorker(int device)
    : device_(device), scratch_(std::make_unique<BufferPool>(kKeepAllScratch, allocate_scratch, release_scratch)),
      queue_(std::make_shared<TaskQueue>("cuda:" + std::to_string(device))) {}

DeviceWorker::~DeviceWorker() = default;

DeviceWorker::Ticket DeviceWorker::submit(Task task) {
  std::lock_guard<std::mutex> lk(life_mu_);
  if (!running_) launch_locked();
  return queue_->submit(std::move(task));
}

void DeviceWorker::launch_locked() {
  running_ = true;
  stop_asked_.store(false, std::memory_order_relaxed);
  // Detached: the worker object outlives it (it is never destroyed), and stop_all waits on ends_.
  std::thread([this] { loop(); }).detach();
}

Status DeviceWorker::start() {
  if (auto e = cudaSetDevice(device_); e != cudaSuccess) return cuda_error("cudaSetDevice", e);
  cudaStream_t s = nullptr;
  cudaEvent_t ev = nullptr;
  if (auto e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); e != cudaSuccess)
    return cuda_error("cudaStreamCreate", e);
  stream_ = s;
  tl_worker_stream = s;
  if (auto e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming); e != cudaSuccess)
    return cuda_error("cudaEventCreate", e);
  done_event_ = ev;
  // CUDA loads a kernel at its first launch by default (lazy loading), and loading waits for the
  // whole GPU: were a caller's stream waiting for an op (OpOptions::stream) whose first kernel
  // is being loaded, neither would ever go on (the first stream-ordered op hung so on an H100,
  // and ran with CUDA_MODULE_LOADING=EAGER). So this GPU's kernels of chorus load here, once.
  if (Status st = preload_copy_kernel(); !st.is_ok()) return st;
  if (Status st = preload_reduce_kernels(); !st.is_ok()) return st;
  // Direct peer-to-peer copies and kernel access to every GPU the hardware connects to this one
  // (cudaMemcpyPeer goes through host memory to the others); and, as those reach memory from
  // cudaMalloc once peer access is on, the GPUs that can reach this one's memory reach its
  // scratch, which comes from its default memory pool.
  int n = 0;
  cudaGetDeviceCount(&n);
  cudaMemPool_t pool = nullptr;
  if (cudaDeviceGetDefaultMemPool(&pool, device_) != cudaSuccess) pool = nullptr;
  for (int d = 0; d < n; ++d) {
    if (d == device_) continue;
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, device_, d) == cudaSuccess && can) cudaDeviceEnablePeerAccess(d, 0);
    if (pool && cudaDeviceCanAccessPeer(&can, d, device_) == cudaSuccess && can) {
      cudaMemAccessDesc access{};
      access.location.type = cudaMemLocationTypeDevice;
      access.location.id = d;
      access.flags = cudaMemAccessFlagsProtReadWrite;
      cudaMemPoolSetAccess(pool, &access, 1);
    }
  }
  (void)cudaGetLastError();  // "already enabled" is not an error worth keeping
  return Status::ok();
}

void DeviceWorker::finish() {
  scratch_->release_idle();  // cudaFreeAsync on the stream, which the sync below drains
  if (stream_) cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  if (done_event_) cudaEventDestroy(static_cast<cudaEvent_t>(done_event_));
  if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  done_event_ = nullptr;
  stream_ = nullptr;
  tl_worker_stream = nullptr;
  (void)cudaGetLastError();
}

void DeviceWorker::loop() {
  auto queue = queue_;
#ifdef __linux__
  prctl(PR_SET_TIMERSLACK, 1000UL);  // a nap of the stream's poll is 20 us, not 70
#endif
  for (;;) {
    const Status started = in_context("cuda:" + std::to_string(device_), start());
    if (started.is_ok())
      CHORUS_LOG(info, cuda, LogWhere{}, "GPU " + std::to_string(device_) + ": device actor ready");
    else
      CHORUS_LOG(warn, cuda, LogWhere{}, "GPU " + std::to_string(device_) + ": device actor cannot start: " + started.message());
    const std::function<Status(const Task&)> run = [&](const Task& task) -> Status {
      if (!started.is_ok()) return started;
      // Every task starts on this GPU with no stale error (NCCL's error paths may switch devices;
      // a failed call earlier leaves its error behind).
      cudaSetDevice(device_);
      (void)cudaGetLastError();
      return task();
    };
    while (!stop_asked_.load(std::memory_order_acquire)) queue->serve_one(Clock::now() + kIdleLook, run);
    while (queue->serve_one(Clock::now(), run)) {
    }
    finish();
    {
      std::lock_guard<std::mutex> lk(life_mu_);
      if (queue->empty()) {  // no submission can land now without starting a new thread
        running_ = false;
        CHORUS_LOG(info, cuda, LogWhere{}, "GPU " + std::to_string(device_) + ": device actor stopped");
        ends_.set(ends_.value.load(std::memory_order_relaxed) + 1);
        return;
      }
      stop_asked_.store(false, std::memory_order_relaxed);  // work came in meanwhile: serve it
    }
  }
}

Status DeviceWorker::call(Task task, Clock::time_point deadline, const std::string& what) {
  return wait(submit(std::move(task)), deadline, what);
}

Status DeviceWorker::call(Task task) {
  return call(std::move(task), Clock::now() + std::chrono::seconds(60), "device work");
}

std::shared_ptr<std::byte> DeviceWorker::scratch(std::size_t bytes, Status& error) {
  tl_scratch_error = cudaSuccess;
  try {
    return scratch_->take(bytes);
  } catch (const std::bad_alloc&) {
    const std::string what = "scratch memory of " + std::to_string(bytes) + " bytes on cuda:" + std::to_string(device_);
    error = tl_scratch_error != cudaSuccess ? cuda_error("cudaMallocAsync of " + what, tl_scratch_error)
                                            : device_error(what + ": out of host memory for its bookkeeping");
    return nullptr;
  }
}

Status DeviceWorker::synchronize(Clock::time_point deadline, const std::function<Status()>& watch) {
  auto s = static_cast<cudaStream_t>(stream_);
  auto ev = static_cast<cudaEvent_t>(done_event_);
  if (auto e = cudaEventRecord(ev, s); e != cudaSuccess) return cuda_error("cudaEventRecord", e);
  // A "not ready" answer is recorded as the thread's last error: clear it each time.
  auto drained = [ev] {
    if (cudaEventQuery(ev) != cudaErrorNotReady) return true;
    (void)cudaGetLastError();
    return false;
  };
  Status waited = poll_until(drained, [&] { return watch ? watch() : Status::ok(); }, deadline, kStreamPace,
                             "the GPU work did not finish in time");
  if (!waited.is_ok()) return waited;
  if (auto e = cudaEventQuery(ev); e != cudaSuccess) return cuda_error("CUDA stream", e);
  return Status::ok();
}

} // namespace chorus::gpu
