// GPU tensors of node processes that share one GPU (issue 13, item 6): NCCL cannot serve them (one
// rank per GPU), and staging through host memory copies every byte twice over PCIe. Instead they
// meet in the host's arena (strategies/arena.hpp) like small host ops do: first their calls and
// GPUs, then (where those agree) CUDA IPC handles of their buffers (cuda/ipc_calls.hpp) rather
// than data. If every peer of the world posted the same well-formed call on the same GPU, the
// op's lead (the root, or rank 0) opens the others'
// buffers and runs the op's fused plan over all of them (cuda/device_plan.hpp: each input read
// once, each output written once, as for logical peers of one process), then concludes the op in
// the arena with its status, which every peer returns. Anything else (other GPUs, host tensors
// somewhere, a malformed call, a peer later than half the op's timeout) takes the ordinary path
// (NCCL or staging) under the same sequence number.
//
// Logical peers of one process on one GPU meet in the process's arena the same way, once: their
// calls, the GPU and their buffers' addresses, which the lead uses as they are (nothing exported,
// nothing opened). Without it their op went through the local server, whose match cost a 1 KiB
// all_reduce of 2 peers on an H200 10 of its ~25 us.
#pragma once
#include <optional>

#include "runtime/peer/run_op.hpp"

namespace chorus::peer_impl {

// The op in the arena on GPU tensors: its status when it ran there; nullopt when it takes the
// ordinary path, with req.op.seq its sequence number (already taken) and `rec` noting its entry.
std::optional<Status> gpu_arena_collective(PeerState& s, OpRecord& rec, OpRequestData& req, const Tensor& in,
                                           const Tensor& out);
// The same for the logical peers of one process (no node, no export; the path is "device").
std::optional<Status> gpu_local_arena_collective(PeerState& s, OpRecord& rec, OpRequestData& req, const Tensor& in,
                                                 const Tensor& out);

} // namespace chorus::peer_impl
