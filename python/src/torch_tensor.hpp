// Torch tensors as chorus tensors: the same memory, never copied. The chorus tensor holds a
// reference to the torch tensor, so an op in flight keeps its memory alive.
#pragma once
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
// t's GPU; nullptr for a CPU tensor.
void* stream_of(const at::Tensor& t);

} // namespace chorus::python
