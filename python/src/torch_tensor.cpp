#include "torch_tensor.hpp"

#include <memory>

#ifdef CHORUS_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include "errors.hpp"

namespace chorus::python {

DType dtype_of(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Half: return DType::f16;
    case c10::ScalarType::BFloat16: return DType::bf16;
    case c10::ScalarType::Float: return DType::f32;
    case c10::ScalarType::Double: return DType::f64;
    case c10::ScalarType::Char: return DType::i8;
    case c10::ScalarType::Byte: return DType::u8;
    case c10::ScalarType::Int: return DType::i32;
    case c10::ScalarType::Long: return DType::i64;
    default:
      invalid(std::string("chorus has no dtype for torch.") + c10::toString(t) +
              " (it takes float16, bfloat16, float32, float64, int8, uint8, int32 and int64)");
  }
}

Tensor view_of(const at::Tensor& t, const std::string& what) {
  if (!t.defined()) invalid(what + " is an undefined tensor");
  if (t.layout() != c10::kStrided)
    invalid(what + " is a " + c10::str(t.layout()) + " tensor: chorus takes dense (strided) tensors (call .to_dense())");
  const DType dtype = dtype_of(t.scalar_type());
  if (!t.is_contiguous()) invalid(what + " is not contiguous (call .contiguous() first)");
  Device device = Device::cpu();
  if (t.is_cuda()) {
#ifdef CHORUS_TORCH_CUDA
    device = Device::cuda(t.get_device());
#else
    invalid(what + " is on " + t.device().str() + ", but this chorus module was built against a torch without CUDA");
#endif
  } else if (!t.is_cpu()) {
    invalid(what + " is on " + t.device().str() + " (chorus takes CPU and CUDA tensors)");
  }
  // The reference to the torch tensor lives as long as any copy of the chorus tensor.
  auto keep = std::make_shared<at::Tensor>(t);
  return Tensor::wrap(t.data_ptr(), dtype, Shape{t.numel()}, device, std::static_pointer_cast<void>(keep));
}

void* stream_of(const at::Tensor& t) {
#ifdef CHORUS_TORCH_CUDA
  if (t.is_cuda()) {
    cudaStream_t s = c10::cuda::getCurrentCUDAStream(t.get_device()).stream();
    return s ? static_cast<void*>(s) : static_cast<void*>(cudaStreamLegacy);
  }
#endif
  (void)t;
  return nullptr;
}

std::shared_ptr<void> on_device_of(const at::Tensor& t) {
#ifdef CHORUS_TORCH_CUDA
  if (t.is_cuda()) return std::make_shared<c10::cuda::CUDAGuard>(t.device());
#endif
  (void)t;
  return nullptr;
}

} // namespace chorus::python
