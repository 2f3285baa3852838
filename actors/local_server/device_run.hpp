// Ops of this process whose tensors live on GPUs. The local server matches the calls as for host
// tensors; then, instead of a host schedule, the op becomes one DeviceCollective (cuda/gpu.hpp)
// that the device actors run: every logical peer on one GPU in one fused pass, peers on distinct
// GPUs through NCCL (strategy nccl, or auto), or the on-device plan otherwise. Every peer of the op
// gets the same outcome: the first peer to come for it hands the op to the device actors and the
// others wait for that answer.
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include <chorus/status.hpp>
#include <chorus/tensor.hpp>
#include "actors/local_server/op_validation.hpp"
#include "core/wait.hpp"
#include "cuda/device_plan.hpp"
#include "strategies/tuning.hpp"

namespace chorus {

class DeviceRun {
 public:
  DeviceRun(gpu::DeviceCollective op, Clock::time_point deadline);
  // Runs the op (first caller) or waits for it (the others); every peer gets the same status.
  Status join();
  const gpu::DeviceCollective& op() const { return op_; }
  // What runs it: NCCL where the planner chose it (make_device_run), else the on-device plan.
  RunStrategy strategy() const { return strategy_; }

 private:
  gpu::DeviceCollective op_;
  Clock::time_point deadline_;
  RunStrategy strategy_;
  std::atomic<bool> started_{false};
  WaitWord done_;
  Status result_;
};

// One peer's tensors as it passed them (out undefined: in place), and its id for messages.
struct PeerTensors {
  Tensor in, out;
  uint32_t id = 0;
};

// Whether a peer's tensors (either may be undefined) include a GPU tensor.
inline bool on_device(const Tensor& in, const Tensor& out) {
  return (in.defined() && in.is_cuda()) || (out.defined() && out.is_cuda());
}

// The run of an op whose peers agreed on `shape` (check_agreement), or the error every peer gets
// (without the op's label, which the caller adds):
// host and GPU tensors mixed, one peer's input and output on different GPUs, a GPU that does not
// exist here. `choice` is the configured strategy for the op kind (nccl or auto allow NCCL).
Status make_device_run(const std::vector<PeerTensors>& peers, const OpShape& shape, const StrategyChoice& choice,
                       Clock::time_point deadline, const std::string& label, std::shared_ptr<DeviceRun>& run);

} // namespace chorus
