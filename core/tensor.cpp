#include <chorus/tensor.hpp>

#include <cstdlib>
#include <stdexcept>

#include "core/device_memory.hpp"

namespace chorus {

namespace {
Shape clamp(Shape s) {
  for (auto& d : s) d = d < 0 ? 0 : d;
  return s;
}
// The device index of copy() for a tensor's device.
int where(Device d) { return d.is_cuda() ? d.index : DeviceMemory::kHost; }
} // namespace

Tensor Tensor::zeros(DType dtype, Shape shape, Device device) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = clamp(std::move(shape));
  t.shape_set_ = true;
  t.device_ = device;
  std::size_t bytes = t.nbytes();
  if (device.is_cuda()) {
    void* p = nullptr;
    DeviceMemory& mem = device_memory();
    Status s = mem.allocate(device.index, bytes, &p);
    if (s) s = mem.memset_zero(device.index, p, bytes);
    if (!s) {
      mem.release(device.index, p);
      throw std::runtime_error("Tensor::zeros(" + std::string(to_string(dtype)) + shape_string(t.shape_) + " on " +
                               device.str() + "): " + s.message());
    }
    const int index = device.index;
    t.owner_ = std::shared_ptr<void>(p, [index, &mem](void* q) { mem.release(index, q); });
    t.data_ = p;
    return t;
  }
  // 64-byte alignment keeps vector loads aligned; round up so aligned_alloc accepts the size.
  std::size_t alloc = ((bytes ? bytes : 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, alloc);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, alloc);
  t.owner_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  t.data_ = p;
  return t;
}

Tensor Tensor::borrow(void* data, DType dtype, Shape shape, Device device) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = clamp(std::move(shape));
  t.shape_set_ = true;
  t.device_ = device;
  t.data_ = data;
  return t;
}

Tensor Tensor::wrap(void* data, DType dtype, Shape shape, Device device, std::shared_ptr<void> keep_alive) {
  Tensor t = borrow(data, dtype, std::move(shape), device);
  t.owner_ = std::move(keep_alive);
  return t;
}

Tensor Tensor::to(Device device) const {
  Tensor r = zeros(dtype_, shape_, device);
  if (nbytes() == 0) return r;
  if (!is_cuda() && !device.is_cuda()) {
    std::memcpy(r.data_, data_, nbytes());
    return r;
  }
  if (Status s = device_memory().copy(r.data_, where(device), data_, where(device_), nbytes()); !s)
    throw std::runtime_error("Tensor::to(" + device.str() + ") of " + describe() + ": " + s.message());
  return r;
}

void Tensor::copy_from(const Tensor& src) {
  if (src.nbytes() != nbytes())
    throw std::invalid_argument("Tensor::copy_from: " + src.describe() + " into " + describe() + " (sizes differ)");
  if (nbytes() == 0 || src.data_ == data_) return;
  if (!is_cuda() && !src.is_cuda()) {
    std::memcpy(data_, src.data_, nbytes());
    return;
  }
  if (Status s = device_memory().copy(data_, where(device_), src.data_, where(src.device_), nbytes()); !s)
    throw std::runtime_error("Tensor::copy_from: " + src.describe() + " into " + describe() + ": " + s.message());
}

std::string Device::str() const { return is_cuda() ? "cuda:" + std::to_string(index) : "cpu"; }

std::size_t Tensor::numel() const { return shape_set_ ? shape_numel(shape_) : 0; }

std::size_t shape_numel(const Shape& s) {
  std::size_t n = 1;
  for (auto d : s) n *= static_cast<std::size_t>(d);
  return n;
}

std::string shape_string(const Shape& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

std::string Tensor::describe() const {
  if (!defined()) return "none";
  std::string d = std::string(to_string(dtype_)) + shape_string(shape_);
  return is_cuda() ? d + " on " + device_.str() : d;
}

} // namespace chorus
