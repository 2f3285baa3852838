#include "actors/local_server/device_run.hpp"

#include "core/log.hpp"
#include "cuda/gpu.hpp"
#include "strategies/planner.hpp"

namespace chorus {

DeviceRun::DeviceRun(gpu::DeviceCollective op, Clock::time_point deadline)
    : op_(std::move(op)),
      deadline_(deadline),
      strategy_(RunStrategy::of(op_.use_nccl ? RunStrategy::Path::nccl : RunStrategy::Path::device)) {}

Status DeviceRun::join() {
  if (!started_.exchange(true)) {
    result_ = gpu::run_collective(op_, deadline_);
    done_.set(1);
    return result_;
  }
  // The running peer returns soon after the deadline (the device actors give up then and their
  // callers allow them 2 s to say why), so a little more slack suffices here.
  if (!done_.wait_at_least(1, deadline_ + std::chrono::seconds(3)))
    return {Errc::timeout, op_.label + ": the GPU work did not finish in time"};
  return result_;
}

Status make_device_run(const std::vector<PeerTensors>& peers, const OpShape& shape, const StrategyChoice& choice,
                       Clock::time_point deadline, const std::string& label, std::shared_ptr<DeviceRun>& run) {
  gpu::DeviceCollective c;
  static_cast<OpDesc&>(c) = shape;
  c.label = label;
  // One kind of device for the whole op: checked first, so that a host peer is named even where
  // the GPUs themselves are missing.
  int host_peer = -1, gpu_peer = -1;
  for (std::size_t p = 0; p < peers.size(); ++p)
    for (const Tensor* t : {&peers[p].in, &peers[p].out}) {
      if (!t->defined()) continue;
      int& first = t->is_cuda() ? gpu_peer : host_peer;
      if (first < 0) first = static_cast<int>(p);
    }
  if (host_peer >= 0 && gpu_peer >= 0)
    return {Errc::device_mismatch, "peer " + std::to_string(peers[gpu_peer].id) + " passes GPU tensors but peer " +
                                       std::to_string(peers[host_peer].id) +
                                       " passes host tensors (all peers of an op use one kind of device)"};
  for (std::size_t p = 0; p < peers.size(); ++p) {
    const Tensor& in = peers[p].in;
    const Tensor& out = peers[p].out;
    if (in.defined() && out.defined() && in.device() != out.device())
      return {Errc::device_mismatch, "peer " + std::to_string(peers[p].id) + " passes its input on " + in.device().str() +
                                         " and its output on " + out.device().str()};
  }
  const int gpus = gpu::device_count();
  for (std::size_t p = 0; p < peers.size(); ++p) {
    const Tensor& in = peers[p].in;
    const Tensor& out = peers[p].out.defined() ? peers[p].out : peers[p].in;
    gpu::DevicePeerBuffers b;
    b.device = -1;
    for (const Tensor* t : {&in, &out}) {
      if (!t->defined()) continue;
      if (t->device().index < 0 || t->device().index >= gpus)
        return {Errc::device_error,
                "peer " + std::to_string(peers[p].id) + " passes a tensor on " + t->device().str() + ", but " +
                    (gpu::built_with_cuda() ? "this machine has " + std::to_string(gpus) + " CUDA device(s)"
                                            : gpu::device_name(0))};
      b.device = t->device().index;
    }
    if (in.defined()) b.in = in.data();
    if (out.defined()) b.out = out.data();
    c.peers.push_back(b);
  }
  // A peer that passed no tensor at all (an ignored buffer) counts as on the first GPU peer's device.
  for (auto& b : c.peers)
    if (b.device < 0) b.device = c.peers[gpu_peer].device;
  // The planner's choice, on what NCCL can take of these buffers.
  const bool takes = gpu::nccl_supports(c);
  c.use_nccl = device_through_nccl(choice, takes);
  if (!takes && auto_or_nccl(choice))
    CHORUS_LOG(trace, cuda, LogWhere{}, label + ": NCCL cannot serve it (peers sharing a GPU, an op or dtype NCCL lacks, "
                                                "or overlapping buffers): the on-device plan runs it");
  run = std::make_shared<DeviceRun>(std::move(c), deadline);
  return Status::ok();
}

} // namespace chorus
