#include "cuda/device_worker.hpp"

#include <cuda_runtime.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cuda/cuda_error.hpp"

namespace chorus::gpu {

namespace {

using Clock = std::chrono::steady_clock;

// A short spin before sleeping: a collective's reply usually comes within microseconds, and a
// condition-variable wake-up costs tens of them.
template <class Pred>
bool spin_for(Pred ready, std::chrono::microseconds d) {
  const auto until = Clock::now() + d;
  while (Clock::now() < until)
    if (ready()) return true;
  return ready();
}

} // namespace

struct DeviceWorker::Scratch {
  std::vector<std::pair<void*, std::size_t>> slots;
};

struct DeviceWorker::Job {
  Task task;
  std::atomic<bool> done{false};
  // queued -> running (the worker took it) or queued -> abandoned (its caller gave up first: the
  // worker skips it); one compare-and-swap decides which.
  enum State : int { queued, running, abandoned };
  std::atomic<int> state{queued};
  std::string result;
  std::mutex mu;
  std::condition_variable cv;
};

struct DeviceWorker::Mailbox {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<Job>> jobs;
  std::atomic<std::size_t> queued{0};
  std::string start_error;  // set once by the worker if cudaSetDevice / stream creation failed
};

DeviceWorker& DeviceWorker::of(int device) {
  // Never destroyed: a tensor freed during exit may still come here, and the worker threads live
  // as long as the process.
  static auto* mu = new std::mutex;
  static auto* workers = new std::map<int, DeviceWorker*>;
  std::lock_guard<std::mutex> lk(*mu);
  auto it = workers->find(device);
  if (it != workers->end()) return *it->second;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    n = 0;
  }
  if (device < 0 || device >= n)
    throw std::out_of_range("cuda:" + std::to_string(device) + " does not exist (" + std::to_string(n) +
                            " CUDA device(s) here)");
  auto* w = new DeviceWorker(device);
  (*workers)[device] = w;
  return *w;
}

DeviceWorker::DeviceWorker(int device)
    : device_(device), scratch_(std::make_unique<Scratch>()), mailbox_(std::make_shared<Mailbox>()) {
  std::thread([this] { loop(); }).detach();
}

DeviceWorker::~DeviceWorker() = default;

void DeviceWorker::loop() {
  auto mb = mailbox_;
  if (auto e = cudaSetDevice(device_); e != cudaSuccess) mb->start_error = cuda_error("cudaSetDevice", e);
  cudaStream_t s = nullptr;
  cudaEvent_t ev = nullptr;
  if (mb->start_error.empty()) {
    if (auto e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); e != cudaSuccess)
      mb->start_error = cuda_error("cudaStreamCreate", e);
    else if (auto e2 = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming); e2 != cudaSuccess)
      mb->start_error = cuda_error("cudaEventCreate", e2);
  }
  stream_ = s;
  done_event_ = ev;
  // Direct peer-to-peer copies and kernel access to every GPU the hardware connects to this one;
  // cudaMemcpyPeer goes through host memory to the others.
  if (mb->start_error.empty()) {
    int n = 0;
    cudaGetDeviceCount(&n);
    for (int d = 0; d < n; ++d) {
      int can = 0;
      if (d != device_ && cudaDeviceCanAccessPeer(&can, device_, d) == cudaSuccess && can)
        cudaDeviceEnablePeerAccess(d, 0);
    }
    (void)cudaGetLastError();  // "already enabled" is not an error worth keeping
  }
  for (;;) {
    std::shared_ptr<Job> job;
    spin_for([&] { return mb->queued.load(std::memory_order_acquire) > 0; }, std::chrono::microseconds(50));
    {
      std::unique_lock<std::mutex> lk(mb->mu);
      mb->cv.wait(lk, [&] { return !mb->jobs.empty(); });
      job = std::move(mb->jobs.front());
      mb->jobs.pop_front();
      mb->queued.fetch_sub(1, std::memory_order_release);
    }
    std::string r;
    if (!mb->start_error.empty()) {
      r = "cuda:" + std::to_string(device_) + ": " + mb->start_error;
    } else if (int q = Job::queued; job->state.compare_exchange_strong(q, Job::running)) {
      // Every task starts on this GPU with no stale error (NCCL's error paths may switch devices;
      // a failed call earlier leaves its error behind).
      cudaSetDevice(device_);
      (void)cudaGetLastError();
      try {
        r = job->task();
      } catch (const std::exception& e) {
        r = std::string("device task failed: ") + e.what();
      } catch (...) {
        r = "device task failed with an unknown exception";
      }
    }
    {
      std::lock_guard<std::mutex> lk(job->mu);
      job->result = std::move(r);
      job->done.store(true, std::memory_order_release);
    }
    job->cv.notify_all();
  }
}

DeviceWorker::Ticket DeviceWorker::submit(Task task) {
  auto job = std::make_shared<Job>();
  job->task = std::move(task);
  {
    std::lock_guard<std::mutex> lk(mailbox_->mu);
    mailbox_->jobs.push_back(job);
    mailbox_->queued.fetch_add(1, std::memory_order_release);
  }
  mailbox_->cv.notify_one();
  return job;
}

std::string DeviceWorker::wait(const Ticket& job, Clock::time_point deadline, const std::string& what, bool abandon) {
  if (!spin_for([&] { return job->done.load(std::memory_order_acquire); }, std::chrono::microseconds(100))) {
    std::unique_lock<std::mutex> lk(job->mu);
    if (!job->cv.wait_until(lk, deadline, [&] { return job->done.load(std::memory_order_acquire); })) {
      int q = Job::queued;
      const bool skipped = abandon && job->state.compare_exchange_strong(q, Job::abandoned);
      return "timeout: " + what + " on cuda:" + std::to_string(device_) +
             (skipped ? " did not start in time (skipped)" : " did not finish in time");
    }
  }
  std::lock_guard<std::mutex> lk(job->mu);
  return job->result;
}

std::string DeviceWorker::call(Task task, Clock::time_point deadline, const std::string& what) {
  return wait(submit(std::move(task)), deadline, what);
}

std::string DeviceWorker::call(Task task) {
  return call(std::move(task), Clock::now() + std::chrono::seconds(60), "device work");
}

bool DeviceWorker::ran(const Ticket& job) const {
  return job->state.load(std::memory_order_acquire) == Job::running;
}

void* DeviceWorker::scratch(int k, std::size_t bytes, std::string& error) {
  auto& slots = scratch_->slots;
  if (slots.size() <= static_cast<std::size_t>(k)) slots.resize(k + 1, {nullptr, 0});
  auto& [p, cap] = slots[k];
  if (cap >= bytes && p) return p;
  if (p) cudaFree(p);
  p = nullptr;
  cap = 0;
  // Grow by half again so that a slowly growing size does not reallocate every time.
  std::size_t want = bytes + bytes / 2;
  if (auto e = cudaMalloc(&p, want ? want : 1); e != cudaSuccess) {
    p = nullptr;
    error = cuda_error("cudaMalloc (scratch)", e);
    return nullptr;
  }
  cap = want;
  return p;
}

std::string DeviceWorker::synchronize(Clock::time_point deadline, const std::function<std::string()>& watch) {
  auto s = static_cast<cudaStream_t>(stream_);
  auto ev = static_cast<cudaEvent_t>(done_event_);
  if (auto e = cudaEventRecord(ev, s); e != cudaSuccess) return cuda_error("cudaEventRecord", e);
  // Spin first (small ops finish in microseconds), then poll with short sleeps until the deadline.
  // A "not ready" answer is recorded as the thread's last error: clear it each time.
  auto ready = [&] {
    if (cudaEventQuery(ev) != cudaErrorNotReady) return true;
    (void)cudaGetLastError();
    return false;
  };
  if (!spin_for(ready, std::chrono::microseconds(200)))
    while (!ready()) {
      if (Clock::now() >= deadline) return "timeout: the GPU work did not finish in time";
      if (watch)
        if (std::string e = watch(); !e.empty()) return e;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  if (auto e = cudaEventQuery(ev); e != cudaSuccess) return cuda_error("CUDA stream", e);
  return {};
}

} // namespace chorus::gpu
