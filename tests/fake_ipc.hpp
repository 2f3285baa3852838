// A test double of CUDA IPC behind cuda/ipc_calls.hpp, for machines without a GPU: "GPU memory"
// is host memory, a handle names a registered buffer, opening it looks the buffer up, and the plan
// runs on host memory (host_plan_runner.hpp). The node processes of a test share it (they are
// Runtimes of one process), so its counts say who exported, opened and ran what. `gpu_of` says
// which GPU a device index is (the same in every node). A failure put in place is what the next
// runs answer, as a CUDA error in the lead would be.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "cuda/ipc_calls.hpp"

namespace chorus::fake {

class FakeIpc final : public gpu::IpcCalls {
 public:
  explicit FakeIpc(std::function<int(int device)> gpu_of) : gpu_of_(std::move(gpu_of)) {}
  std::string name() const override { return "fake CUDA IPC"; }
  Status identify(int device, gpu::GpuUuid& id) override;
  Status export_buffer(int device, const void* p, gpu::IpcBuffer& b) override;
  Status open_buffer(int device, const gpu::IpcBuffer& b, void** p) override;
  void release_buffer(int device, const gpu::IpcBuffer& b) override;
  Status run(const gpu::DeviceCollective& c, Clock::time_point deadline) override;

  void fail_runs_with(Status s);
  void fail_exports_with(Status s);  // every export from now on answers `s` (ok: none)
  // Runs wait at their start until released (a lead held mid-op); running() says one is there.
  void hold_runs();
  bool wait_until_running(std::chrono::milliseconds at_most);
  void release_runs();
  int exports() const { return exports_.load(); }
  int opens() const { return opens_.load(); }
  int releases() const { return releases_.load(); }
  int runs() const { return runs_.load(); }
  int buffers_in_last_run() const { return last_buffers_.load(); }

 private:
  std::function<int(int)> gpu_of_;
  std::mutex mu_;
  std::map<uint64_t, void*> exported_;  // handle number -> buffer
  uint64_t next_ = 1;
  Status failure_, export_failure_;
  std::condition_variable cv_;
  bool hold_ = false, running_ = false;
  std::atomic<int> exports_{0}, opens_{0}, releases_{0}, runs_{0}, last_buffers_{0};
};

// The double plays CUDA IPC while it lives.
struct IpcDoubleInPlace {
  explicit IpcDoubleInPlace(gpu::IpcCalls* calls) { gpu::set_ipc_calls(calls); }
  ~IpcDoubleInPlace() { gpu::set_ipc_calls(nullptr); }
};

} // namespace chorus::fake
