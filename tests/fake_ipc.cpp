#include "fake_ipc.hpp"

#include <cstring>
#include <memory>
#include <vector>

#include "cuda/device_status.hpp"
#include "host_plan_runner.hpp"

namespace chorus::fake {

Status FakeIpc::identify(int device, gpu::GpuUuid& id) {
  const int g = gpu_of_(device);
  if (g < 0) return {Errc::device_error, "fake: no cuda:" + std::to_string(device)};
  id.fill(0xa5);
  std::memcpy(id.data(), &g, sizeof g);
  return Status::ok();
}

Status FakeIpc::export_buffer(int, const void* p, gpu::IpcBuffer& b) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!export_failure_.is_ok()) return export_failure_;
  const uint64_t n = next_++;
  exported_[n] = const_cast<void*>(p);
  b = gpu::IpcBuffer{};
  std::memcpy(b.handle.data(), &n, sizeof n);
  b.offset = 0;
  ++exports_;
  return Status::ok();
}

Status FakeIpc::open_buffer(int, const gpu::IpcBuffer& b, void** p) {
  uint64_t n = 0;
  std::memcpy(&n, b.handle.data(), sizeof n);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = exported_.find(n);
  if (it == exported_.end()) return {Errc::device_error, "fake: no buffer exported as handle " + std::to_string(n)};
  *p = static_cast<std::byte*>(it->second) + b.offset;
  ++opens_;
  return Status::ok();
}

void FakeIpc::release_buffer(int, const gpu::IpcBuffer&) { ++releases_; }

void FakeIpc::fail_exports_with(Status s) {
  std::lock_guard<std::mutex> lock(mu_);
  export_failure_ = std::move(s);
}

void FakeIpc::fail_runs_with(Status s) {
  std::lock_guard<std::mutex> lock(mu_);
  failure_ = std::move(s);
}

void FakeIpc::hold_runs() {
  std::lock_guard<std::mutex> lock(mu_);
  hold_ = true;
}

bool FakeIpc::wait_until_running(std::chrono::milliseconds at_most) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, at_most, [&] { return running_; });
}

void FakeIpc::release_runs() {
  std::lock_guard<std::mutex> lock(mu_);
  hold_ = false;
  cv_.notify_all();
}

Status FakeIpc::run(const gpu::DeviceCollective& c, Clock::time_point deadline) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    running_ = true;
    cv_.notify_all();
    // Held as a GPU run would be, at most until the op's deadline.
    if (!cv_.wait_until(lock, deadline, [&] { return !hold_; }))
      return {Errc::timeout, c.label + ": fake: held past the deadline"};
    running_ = false;
    if (!failure_.is_ok()) return gpu::in_context(c.label, failure_);
  }
  int buffers = 0;
  for (const auto& p : c.peers) buffers += (p.in != nullptr) + (p.out != nullptr && p.out != p.in);
  last_buffers_ = buffers;
  std::vector<std::unique_ptr<std::byte[]>> scratch;
  gpu::DevicePlan plan = gpu::plan_collective(c, [&](int, std::size_t bytes) {
    scratch.push_back(std::make_unique<std::byte[]>(bytes ? bytes : 1));
    return static_cast<void*>(scratch.back().get());
  });
  testing_support::run_plan_on_host(plan, c.dtype, c.redop);
  ++runs_;
  return Status::ok();
}

} // namespace chorus::fake
