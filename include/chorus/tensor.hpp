// A tensor handle: dtype, shape, device and contiguous memory there (host memory, or GPU memory as an
// opaque pointer host code never dereferences), either owned (shared between copies of the handle)
// or borrowed from the caller (who keeps it alive for the duration of each call).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <chorus/types.hpp>

namespace chorus {

using Shape = std::vector<int64_t>;

enum class DeviceType : uint8_t { cpu, cuda };
struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;  // the CUDA device ordinal (0 for the host)
  static Device cpu() { return {}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:1"
};

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
  // Zero-filled, owned storage on `device` (GPU memory through that GPU's device actor). Negative
  // dimensions are clamped to 0. Throws std::runtime_error with CUDA's message when GPU memory
  // cannot be had (no such device, out of memory, a build without CUDA).
  static Tensor zeros(DType dtype, Shape shape, Device device = Device::cpu());
  // Borrowed storage: chorus never frees it; the caller keeps it alive while an op uses it.
  // For a GPU tensor `data` is a device pointer on `device` (from cudaMalloc or a framework).
  static Tensor borrow(void* data, DType dtype, Shape shape, Device device = Device::cpu());
  // Borrowed storage that `keep_alive` keeps valid as long as any copy of the handle lives (e.g. a
  // pooled buffer whose deleter hands it back).
  static Tensor wrap(void* data, DType dtype, Shape shape, Device device, std::shared_ptr<void> keep_alive);
  // Owned copy of a vector, shaped as 1-D unless a shape is given.
  template <class T>
  static Tensor from(const std::vector<T>& v, Shape shape = {}) {
    if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
    Tensor t = zeros(dtype_of<T>(), std::move(shape));
    std::memcpy(t.data(), v.data(), std::min(t.nbytes(), v.size() * sizeof(T)));
    return t;
  }

  bool defined() const { return data_ != nullptr || (shape_set_ && numel() == 0); }
  Device device() const { return device_; }
  bool is_cuda() const { return device_.is_cuda(); }
  // An owned copy on `device` (host to GPU, GPU to host, GPU to GPU, or host to host). Throws
  // std::runtime_error with CUDA's message on failure.
  Tensor to(Device device) const;
  // Copies src's bytes into this tensor's memory (any pair of devices; sizes must match). Throws
  // std::invalid_argument on a size mismatch and std::runtime_error with CUDA's message.
  void copy_from(const Tensor& src);
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  std::size_t numel() const;
  std::size_t nbytes() const { return numel() * dtype_size(dtype_); }
  void* data() const { return data_; }  // host memory, or a device pointer for GPU tensors
  template <class T> T* data_as() const { return static_cast<T*>(data_); }
  // The elements, copied to the host (from the GPU for GPU tensors).
  template <class T> std::vector<T> to_vector() const {
    if (is_cuda()) return to(Device::cpu()).to_vector<T>();
    std::vector<T> v(nbytes() / sizeof(T));
    if (!v.empty()) std::memcpy(v.data(), data_, v.size() * sizeof(T));
    return v;
  }
  std::string describe() const;  // "f32[4, 4]", "f32[4, 4] on cuda:0"

 private:
  DType dtype_ = DType::f32;
  Device device_;
  Shape shape_;
  bool shape_set_ = false;
  void* data_ = nullptr;
  std::shared_ptr<void> owner_;
};

std::string shape_string(const Shape& s);  // "[4, 4]"
std::size_t shape_numel(const Shape& s);   // the product of its sizes (1: a scalar)

} // namespace chorus
