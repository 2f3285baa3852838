#include "torch_tensor.hpp"

#include <memory>

#ifdef CHORUS_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include "errors.hpp"

namespace chorus::python {

std::string dtype_name(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Half: return "torch.float16";
    case c10::ScalarType::BFloat16: return "torch.bfloat16";
    case c10::ScalarType::Float: return "torch.float32";
    case c10::ScalarType::Double: return "torch.float64";
    case c10::ScalarType::Char: return "torch.int8";
    case c10::ScalarType::Byte: return "torch.uint8";
    case c10::ScalarType::Short: return "torch.int16";
    case c10::ScalarType::Int: return "torch.int32";
    case c10::ScalarType::Long: return "torch.int64";
    case c10::ScalarType::Bool: return "torch.bool";
    case c10::ScalarType::ComplexHalf: return "torch.complex32";
    case c10::ScalarType::ComplexFloat: return "torch.complex64";
    case c10::ScalarType::ComplexDouble: return "torch.complex128";
    default: return std::string("torch.") + c10::toString(t);
  }
}

Elements elements_of(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Half: return {DType::f16, 1};
    case c10::ScalarType::BFloat16: return {DType::bf16, 1};
    case c10::ScalarType::Float: return {DType::f32, 1};
    case c10::ScalarType::Double: return {DType::f64, 1};
    case c10::ScalarType::Char: return {DType::i8, 1};
    case c10::ScalarType::Byte: return {DType::u8, 1};
    case c10::ScalarType::Int: return {DType::i32, 1};
    case c10::ScalarType::Long: return {DType::i64, 1};
    // torch's bool is one byte, 0 or 1: moved as uint8 (reductions map their op, reduce_op_for).
    case c10::ScalarType::Bool: return {DType::u8, 1};
    // A complex number is its real and imaginary parts, side by side (torch.view_as_real).
    case c10::ScalarType::ComplexFloat: return {DType::f32, 2};
    case c10::ScalarType::ComplexDouble: return {DType::f64, 2};
    default:
      invalid("chorus has no dtype for " + dtype_name(t) +
              " (it takes float16, bfloat16, float32, float64, int8, uint8, int32, int64, bool, complex64 and "
              "complex128)");
  }
}

ReduceOp reduce_op_for(ReduceOp op, c10::ScalarType t, const std::string& what) {
  if (t == c10::ScalarType::Bool) {
    // As ProcessGroupNCCL maps them: a sum of truths is true where any is (an OR, the max of 0s
    // and 1s), a product where all are (an AND, the min). A mean of truths is no truth.
    switch (op) {
      case ReduceOp::sum: return ReduceOp::max;
      case ReduceOp::prod: return ReduceOp::min;
      case ReduceOp::avg:
        invalid(what + ": AVG of bool tensors has no bool result (cast to a numeric dtype first)");
      default: return op;  // MIN, MAX, BAND, BOR, BXOR of 0s and 1s are 0 or 1
    }
  }
  if (t == c10::ScalarType::ComplexFloat || t == c10::ScalarType::ComplexDouble) {
    // Only ops that act on the real and imaginary parts apart are right on their pairs of reals.
    if (op != ReduceOp::sum && op != ReduceOp::avg) {
      const char* name = op == ReduceOp::prod ? "PRODUCT" : op == ReduceOp::min ? "MIN" : op == ReduceOp::max ? "MAX"
                         : op == ReduceOp::band ? "BAND" : op == ReduceOp::bor ? "BOR" : "BXOR";
      invalid(what + ": " + name + " of complex tensors (" + dtype_name(t) +
              ") is not defined elementwise; chorus reduces complex tensors with SUM and AVG only");
    }
  }
  return op;
}

Tensor view_of(const at::Tensor& t, const std::string& what) {
  if (!t.defined()) invalid(what + " is an undefined tensor");
  if (t.layout() != c10::kStrided)
    invalid(what + " is a " + c10::str(t.layout()) + " tensor: chorus takes dense (strided) tensors (call .to_dense())");
  const Elements e = elements_of(t.scalar_type());
  if (!t.is_contiguous()) invalid(what + " is not contiguous (call .contiguous() first)");
  // (CPU tensors of these come staged, resolved: process_group.cpp's staged().)
  if (t.is_conj() || t.is_neg())
    invalid(what + " is a conjugate or negative view (x.conj()), whose memory holds other values than it reads "
                   "(call .resolve_conj() or .resolve_neg() first)");
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
  return Tensor::wrap(t.data_ptr(), e.dtype, Shape{t.numel() * e.per_element}, device,
                      std::static_pointer_cast<void>(keep));
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
