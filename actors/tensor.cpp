#include "actors/tensor.hpp"

#include <cstdlib>

namespace chorus {

namespace {
Shape clamp(Shape s) {
  for (auto& d : s) d = d < 0 ? 0 : d;
  return s;
}
} // namespace

Tensor Tensor::zeros(DType dtype, Shape shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = clamp(std::move(shape));
  t.shape_set_ = true;
  std::size_t bytes = t.nbytes();
  // 64-byte alignment keeps vector loads aligned; round up so aligned_alloc accepts the size.
  std::size_t alloc = ((bytes ? bytes : 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, alloc);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, alloc);
  t.owner_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  t.data_ = p;
  return t;
}

Tensor Tensor::borrow(void* data, DType dtype, Shape shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = clamp(std::move(shape));
  t.shape_set_ = true;
  t.data_ = data;
  return t;
}

std::size_t Tensor::numel() const {
  if (!shape_set_) return 0;
  std::size_t n = 1;
  for (auto d : shape_) n *= static_cast<std::size_t>(d);
  return n;
}

std::string shape_string(const Shape& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

std::string Tensor::describe() const {
  if (!defined()) return "none";
  return std::string(to_string(dtype_)) + shape_string(shape_);
}

} // namespace chorus
