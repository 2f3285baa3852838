#include "cuda/staging.hpp"

#include <exception>
#include <new>

#include "core/buffer_pool.hpp"
#include "cuda/device_status.hpp"
#include "cuda/gpu.hpp"
#include "strategies/reduce_kernels.hpp"

namespace chorus {

namespace {

void* allocate_pinned(std::size_t bytes) {
  void* p = nullptr;
  return gpu::allocate_pinned(bytes, &p).is_ok() ? p : nullptr;
}

// Page-locked host buffers for staging, kept for reuse. Never destroyed: buffers may come back
// during exit.
BufferPool& pinned_pool() {
  static auto* pool = new BufferPool(std::size_t{2} << 30, allocate_pinned, gpu::release_pinned);
  return *pool;
}

// A host tensor in pinned memory, or an ordinary one where pinned memory cannot be had.
Tensor pinned(DType dtype, const Shape& shape) {
  const std::size_t bytes = Tensor::borrow(nullptr, dtype, shape).nbytes();
  try {
    std::shared_ptr<std::byte> buf = pinned_pool().take(bytes);
    std::byte* at = buf.get();  // before buf is moved: arguments are evaluated in no set order
    return Tensor::wrap(at, dtype, shape, Device::cpu(), std::move(buf));
  } catch (const std::bad_alloc&) {
    return Tensor::zeros(dtype, shape);
  }
}

} // namespace

std::size_t release_staging_buffers() { return pinned_pool().release_idle(); }

std::size_t staging_bytes_kept() { return pinned_pool().idle_bytes(); }

Status stage_to_host(const Tensor& t, Tensor& host) {
  if (!t.defined() || !t.is_cuda()) {
    host = t;
    return Status::ok();
  }
  try {
    host = pinned(t.dtype(), t.shape());
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
  return gpu::in_context("accumulate into " + dst.describe(),
                         gpu::accumulate(dst.device().index, dst.dtype(), dst.data(), src.data(), dst.numel()));
}

} // namespace chorus
