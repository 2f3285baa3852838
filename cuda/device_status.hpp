// The Status of GPU work, without a CUDA header (cuda/no_cuda.cpp and the staging code use it too).
// A failure of CUDA or NCCL, or a GPU that is not there, is a device_error carrying CUDA's or
// NCCL's own text; a deadline is a timeout; bad input is invalid_argument. As a status travels up
// (task, rank, op), each level puts its context in front of the message and keeps the code.
#pragma once
#include <string>
#include <utility>

#include <chorus/status.hpp>

namespace chorus::gpu {

inline Status device_error(std::string message) { return {Errc::device_error, std::move(message)}; }

// "context: message", same code; ok stays ok.
inline Status in_context(const std::string& context, Status s) {
  if (s.is_ok()) return s;
  return {s.code(), context + ": " + s.message()};
}

} // namespace chorus::gpu
