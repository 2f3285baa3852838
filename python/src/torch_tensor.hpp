// Torch tensors as chorus tensors: the same memory, never copied. The chorus tensor holds a
// reference to the torch tensor, so an op in flight keeps its memory alive.
#pragma once
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>

#include <chorus/tensor.hpp>
#include <chorus/types.hpp>

namespace chorus::python {

// chorus's dtype for a torch dtype; an invalid_argument Error naming the dtype otherwise.
DType dtype_of(c10::ScalarType t);

// `t`'s memory as a flat chorus tensor of t.numel() elements. `what` names it in errors
// ("allreduce's tensor"). Contiguous tensors only; on the CPU, or on a GPU when this module's
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
