#include "actors/staging.hpp"

#include <exception>

namespace chorus {

Status stage_to_host(const Tensor& t, Tensor& host) {
  if (!t.defined() || !t.is_cuda()) {
    host = t;
    return Status::ok();
  }
  try {
    host = t.to(Device::cpu());
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

} // namespace chorus

#include "cuda/gpu.hpp"
#include "strategies/reduce_kernels.hpp"

namespace chorus {

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
