// The device actor of one GPU: a dedicated thread with a mailbox that owns every CUDA call for that
// GPU (cudaSetDevice once at start, its own non-blocking stream, its scratch memory, its NCCL
// communicators). One per GPU per process, made on first use and kept for the process's life.
// It is not a CAF actor so that the CUDA layer carries no CAF header and tensors can be made
// before any Runtime exists; it behaves like a detached actor: tasks run one at a time, in order.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace chorus::gpu {

class DeviceWorker {
 public:
  using Task = std::function<std::string()>;  // runs on the worker thread; "" = success

  // The worker of `device` (throws std::out_of_range for a device that does not exist).
  static DeviceWorker& of(int device);

  struct Job;
  using Ticket = std::shared_ptr<Job>;

  int device() const { return device_; }
  // Queues `task` (tasks run one at a time, in order); wait() collects its result.
  Ticket submit(Task task);
  // The task's result, or a timeout error naming `what` once `deadline` passes. A task that has not
  // started by then is skipped when `abandon` (one that has finishes on its own and must own what
  // it touches); with abandon = false it stays queued and runs later.
  std::string wait(const Ticket& t, std::chrono::steady_clock::time_point deadline, const std::string& what,
                   bool abandon = true);
  // Whether the worker took the task (it may still be running).
  bool ran(const Ticket& t) const;
  // submit + wait.
  std::string call(Task task, std::chrono::steady_clock::time_point deadline, const std::string& what);
  std::string call(Task task);  // short bookkeeping (allocation, small copies): a 60 s deadline

  // Only on the worker thread:
  void* stream() const { return stream_; }  // the cudaStream_t
  // Scratch memory of at least `bytes`, slot `k` (several live at once). Valid until the next task.
  void* scratch(int k, std::size_t bytes, std::string& error);
  // Waits for the stream to drain, polling until `deadline` (so that a hung kernel cannot hold the
  // task forever); returns the CUDA error or a timeout. While it polls, `watch` (if given) may
  // stop the wait with an error of its own (an NCCL communicator's asynchronous error, say).
  std::string synchronize(std::chrono::steady_clock::time_point deadline,
                          const std::function<std::string()>& watch = {});

  ~DeviceWorker();

 private:
  explicit DeviceWorker(int device);
  struct Mailbox;
  void loop();

  int device_;
  void* stream_ = nullptr;
  void* done_event_ = nullptr;
  struct Scratch;
  std::unique_ptr<Scratch> scratch_;
  std::shared_ptr<Mailbox> mailbox_;
};

} // namespace chorus::gpu
