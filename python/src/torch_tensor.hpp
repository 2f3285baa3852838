// Torch tensors as chorus tensors: the same memory, never copied. The chorus tensor holds a
// reference to the torch tensor, so an op in flight keeps its memory alive.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>

#include <chorus/tensor.hpp>
#include <chorus/types.hpp>

namespace chorus::python {

// A dtype as Python names it ("torch.int16"), for messages.
std::string dtype_name(c10::ScalarType t);

// How chorus holds a torch dtype's elements: `per_element` values of `dtype` each (a complex
// number is two reals); an invalid_argument Error naming the dtype where chorus has none.
struct Elements {
  DType dtype;
  int64_t per_element;
};
Elements elements_of(c10::ScalarType t);

// The op chorus runs for `op` over tensors of torch dtype `t`: bool's SUM and PRODUCT become
// MAX and MIN of 0s and 1s (as ProcessGroupNCCL does), complex takes SUM and AVG only; an
// invalid_argument Error naming `what` for an op the dtype has no meaning for.
ReduceOp reduce_op_for(ReduceOp op, c10::ScalarType t, const std::string& what);

// `t`'s memory as a flat chorus tensor of t.numel() elements (twice that for complex). `what`
// names it in errors ("allreduce's tensor"). Contiguous tensors only; on the CPU, or on a GPU when this module's
// torch has CUDA.
Tensor view_of(const at::Tensor& t, const std::string& what);

// The stream an op on `t` is ordered in, as torch's own GPU backends do: the current stream of
// t's GPU; nullptr for a CPU tensor. torch's default stream, whose handle is null (CUDA's legacy
// stream), is named cudaStreamLegacy: a null OpOptions::stream would mean "no stream", and the op
// would run without waiting for the kernels queued before it.
void* stream_of(const at::Tensor& t);

// For a CUDA tensor, t's GPU made the calling thread's current device until the result is dropped
// (the legacy stream is the current device's); nothing for a CPU tensor.
std::shared_ptr<void> on_device_of(const at::Tensor& t);

} // namespace chorus::python
