#include "actors/staging.hpp"

#include <exception>
#include <mutex>
#include <tuple>
#include <vector>

#include "cuda/gpu.hpp"
#include "strategies/reduce_kernels.hpp"

namespace chorus {

namespace {

// Page-locked host buffers for staging, kept for reuse (allocating pinned memory costs far more
// than a copy). A buffer goes back to the pool when the last tensor over it is dropped.
class PinnedPool {
 public:
  // A host tensor in pinned memory, or an ordinary one where pinned memory cannot be had.
  Tensor take(DType dtype, const Shape& shape) {
    const std::size_t bytes = Tensor::borrow(nullptr, dtype, shape).nbytes();
    void* p = nullptr;
    std::size_t cap = 0;
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (std::size_t i = 0; i < free_.size(); ++i)
        if (free_[i].second >= bytes && free_[i].second <= 2 * bytes + 4096) {
          std::tie(p, cap) = free_[i];
          free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
          break;
        }
    }
    if (!p) {
      cap = bytes ? bytes : 1;
      if (!gpu::allocate_pinned(cap, &p).empty()) return Tensor::zeros(dtype, shape);
    }
    std::shared_ptr<void> back(p, [this, cap](void* q) { give_back(q, cap); });
    return Tensor::wrap(p, dtype, shape, Device::cpu(), std::move(back));
  }

 private:
  void give_back(void* p, std::size_t cap) noexcept {
    std::lock_guard<std::mutex> lk(mu_);
    std::size_t kept = cap;
    for (auto& f : free_) kept += f.second;
    try {
      if (kept <= kMaxKept) {
        free_.push_back({p, cap});
        return;
      }
    } catch (...) {  // a deleter must not throw: free it instead
    }
    gpu::release_pinned(p);
  }
  static constexpr std::size_t kMaxKept = std::size_t{2} << 30;
  std::mutex mu_;
  std::vector<std::pair<void*, std::size_t>> free_;
};

PinnedPool& pinned_pool() {
  static auto* pool = new PinnedPool;  // never destroyed: buffers may come back during exit
  return *pool;
}

} // namespace

Status stage_to_host(const Tensor& t, Tensor& host) {
  if (!t.defined() || !t.is_cuda()) {
    host = t;
    return Status::ok();
  }
  try {
    host = pinned_pool().take(t.dtype(), t.shape());
    host.copy_from(t);
  } catch (const std::exception& e) {
    return {Errc::device_error, e.what()};
  }
  return Status::ok();
}

Status stage_back(const Tensor& host, const Tensor& dst) {
  if (!dst.defined() || !dst.is_cuda()) return Status::ok();
  try {
    Tensor d = dst;
    d.copy_from(host);
  } catch (const std::exception& e) {
    return {Errc::device_error, e.what()};
  }
  return Status::ok();
}


Status accumulate(const Tensor& dst, const Tensor& src) {
  if (dst.dtype() != src.dtype() || dst.numel() != src.numel() || dst.device() != src.device())
    return {Errc::invalid_argument, "accumulate: " + src.describe() + " into " + dst.describe()};
  if (!dst.is_cuda()) {
    reduce2(dst.dtype(), ReduceOp::sum, dst.data(), dst.data(), src.data(), dst.numel());
    return Status::ok();
  }
  if (std::string e = gpu::accumulate(dst.device().index, dst.dtype(), dst.data(), src.data(), dst.numel()); !e.empty())
    return {Errc::device_error, "accumulate into " + dst.describe() + ": " + e};
  return Status::ok();
}

} // namespace chorus
