// Ops on GPU tensors across nodes through NCCL (where the planner's path table, strategies/plan_rules.hpp,
// sends them: the nccl strategy, or auto with a GPU on every node of the op): instead of a host
// schedule, every node announces its ranks' GPUs, its communicator (cuda/nccl_job.hpp's
// NcclAnnounce) and, from the node of rank 0, the unique id a fresh communicator would use. The
// op's plan is empty, so the announcements are all that crosses the data connections, and every
// node judges them alike before NCCL is entered: a mismatched shape, dtype, op or root, or a node
// whose peers pass host tensors, gives every peer the same error. Then NcclRun runs this node's
// ranks on one communicator spanning every node: the first local peer to come for it, the others
// waiting for its answer.
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include <chorus/status.hpp>
#include <chorus/tensor.hpp>

#include "core/wait.hpp"
#include "cuda/nccl_rank_op.hpp"
#include "messages/data_codec.hpp"

namespace chorus {

class GlobalClient;
class NetOp;

// This node's ranks of an NCCL op: their tensors (GPU), checked.
struct NcclLocalRank {
  int rank = 0;
  Tensor in, out;  // out undefined: in place
};

// Fills the NCCL fields of this node's announcement for the op over `rank_node` (group `group`)
// from its ranks' tensors (one kind of device, one GPU per tensor pair, a GPU that exists), and
// returns their parts of the op; an error (device_mismatch, device_error) where they do not fit.
Status announce_nccl(GlobalClient& global, uint32_t group, const std::vector<uint32_t>& rank_node,
                     const std::vector<NcclLocalRank>& mine, OpAnnouncement& a, std::vector<gpu::NcclRankOp>& parts);

class NcclRun {
 public:
  NcclRun(std::shared_ptr<GlobalClient> global, std::shared_ptr<NetOp> op, uint32_t group,
          std::vector<uint32_t> rank_node, std::vector<gpu::NcclRankOp> parts, Clock::time_point deadline,
          std::string label);
  // After this peer's part of the (empty) plan concluded without error: runs this node's ranks
  // (the first caller) or waits for that; every local peer gets the same status.
  Status join();

 private:
  Status run();

  std::shared_ptr<GlobalClient> global_;
  std::shared_ptr<NetOp> op_;
  uint32_t group_;
  std::vector<uint32_t> rank_node_;
  std::vector<gpu::NcclRankOp> parts_;
  Clock::time_point deadline_;
  std::string label_;
  std::atomic<bool> started_{false};
  WaitWord done_;
  Status result_;
};

} // namespace chorus
