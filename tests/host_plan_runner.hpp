// A GPU op plan (cuda/device_plan.hpp) run on host memory, as the GPU executor runs it with
// cudaMemcpy*Async, the copy kernel and the reduction kernel: copies as memcpy, each reduction folded by reduce_n.
// For the plan tests and the CUDA IPC double. `check` sees each step before it runs.
#pragma once
#include <cstring>
#include <functional>
#include <vector>

#include "cuda/device_plan.hpp"
#include "strategies/reduce_kernels.hpp"

namespace chorus::testing_support {

inline void run_plan_on_host(const gpu::DevicePlan& plan, DType t, ReduceOp op,
                             const std::function<void(const gpu::DeviceStep&)>& check = {}) {
  const std::size_t es = dtype_size(t);
  for (const gpu::DeviceStep& s : plan.steps) {
    if (check) check(s);
    if (s.kind == gpu::DeviceStep::Kind::copy) {
      std::memcpy(s.copy.dst, s.copy.src, s.copy.bytes);
      continue;
    }
    if (s.kind == gpu::DeviceStep::Kind::copies) {
      // The kernel runs them in no order: last first here, so that a batch that needed an order
      // gives a wrong result.
      for (auto it = s.copies.copies.rbegin(); it != s.copies.copies.rend(); ++it)
        std::memcpy(it->dst, it->src, it->bytes);
      continue;
    }
    const gpu::DeviceReduce& r = s.reduce;
    std::vector<std::byte> acc(r.count * es + 1);
    reduce_n(t, op, acc.data(), r.srcs.data(), r.srcs.size(), r.count);
    if (r.divisor > 1) divide_by(t, acc.data(), r.count, r.divisor);
    for (auto p : r.dsts) std::memcpy(p, acc.data(), r.count * es);
  }
}

} // namespace chorus::testing_support
