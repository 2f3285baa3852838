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
    auto fold = [&](const std::vector<const void*>& srcs) {
      reduce_n(t, op, acc.data(), srcs.data(), srcs.size(), r.count);
      if (r.divisor > 1) divide_by(t, acc.data(), r.count, r.divisor);
    };
    if (r.block_stride == 0) {
      fold(r.srcs);
      for (auto p : r.dsts) std::memcpy(p, acc.data(), r.count * es);
      continue;
    }
    for (std::size_t y = 0; y < r.dsts.size(); ++y) {  // block y of every source into dsts[y]
      std::vector<const void*> srcs;
      for (auto p : r.srcs) srcs.push_back(static_cast<const std::byte*>(p) + y * r.block_stride);
      fold(srcs);
      std::memcpy(r.dsts[y], acc.data(), r.count * es);
    }
  }
}

} // namespace chorus::testing_support
