#include "actors/local_server/op_request.hpp"

namespace chorus {

std::size_t TensorMeta::numel() const { return present ? shape_numel(shape) : 0; }

std::string TensorMeta::describe() const {
  return present ? std::string(to_string(dtype)) + shape_string(shape) : "none";
}

TensorMeta TensorMeta::of(const Tensor& t) {
  TensorMeta m;
  m.present = t.defined();
  m.dtype = t.dtype();
  m.shape = t.shape();
  return m;
}

} // namespace chorus
