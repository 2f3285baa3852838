// The NCCL path: one communicator per set of GPUs (in rank order), each rank's part run by its
// GPU's device actor on that actor's stream. Made on first use (ncclCommInitRank on every actor at
// once); an op that fails or outlives its deadline aborts every rank's communicator (so no kernel
// waits forever on a peer), and the next op on those GPUs builds a fresh one.
#pragma once
#include <chrono>

#include <chorus/status.hpp>

#include "cuda/device_plan.hpp"

namespace chorus::gpu {

Status run_nccl(const DeviceCollective& c, std::chrono::steady_clock::time_point deadline);
// The GPU layer's teardown: every GPU set's communicators are aborted (ncclCommAbort frees them)
// on their device actors, waiting until `deadline`. Returns the sets released; a later op makes
// its set again.
std::size_t release_nccl_sets(std::chrono::steady_clock::time_point deadline);
std::size_t nccl_sets_kept();

} // namespace chorus::gpu
