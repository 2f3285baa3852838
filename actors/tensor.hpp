// A tensor handle: dtype, shape and contiguous host memory, either owned (shared between copies of
// the handle) or borrowed from the caller (who keeps it alive for the duration of each call).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "strategies/types.hpp"

namespace chorus {

using Shape = std::vector<int64_t>;

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<int8_t>() { return DType::i8; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }

class Tensor {
 public:
  Tensor() = default;
  // Zero-filled, owned storage. Negative dimensions are clamped to 0.
  static Tensor zeros(DType dtype, Shape shape);
  // Borrowed storage: chorus never frees it; the caller keeps it alive while an op uses it.
  static Tensor borrow(void* data, DType dtype, Shape shape);
  // Owned copy of a vector, shaped as 1-D unless a shape is given.
  template <class T>
  static Tensor from(const std::vector<T>& v, Shape shape = {}) {
    if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
    Tensor t = zeros(dtype_of<T>(), std::move(shape));
    std::memcpy(t.data(), v.data(), std::min(t.nbytes(), v.size() * sizeof(T)));
    return t;
  }

  bool defined() const { return data_ != nullptr || (shape_set_ && numel() == 0); }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  std::size_t numel() const;
  std::size_t nbytes() const { return numel() * dtype_size(dtype_); }
  void* data() const { return data_; }
  template <class T> T* data_as() const { return static_cast<T*>(data_); }
  template <class T> std::vector<T> to_vector() const {
    std::vector<T> v(nbytes() / sizeof(T));
    if (!v.empty()) std::memcpy(v.data(), data_, v.size() * sizeof(T));
    return v;
  }
  std::string describe() const;  // "f32[4, 4]"

 private:
  DType dtype_ = DType::f32;
  Shape shape_;
  bool shape_set_ = false;
  void* data_ = nullptr;
  std::shared_ptr<void> owner_;
};

std::string shape_string(const Shape& s);  // "[4, 4]"

} // namespace chorus
