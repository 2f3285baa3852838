// torch.distributed's "chorus" backend: a c10d ProcessGroup whose every op is one or more chorus
// ops on the caller's tensors (no copy where torch's layout is chorus's; a staging buffer where
// torch hands a list of tensors for one buffer, or a CPU tensor of other strides), returned at
// once as a ChorusWork. Ranks and roots are the group's ranks, as in torch.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/version.h>

// torch 1.x runs a backend that is a c10d::ProcessGroup; torch 2.x runs c10d::Backend objects, one
// per device type, under a ProcessGroup that dispatches to them. The class is the same over both
// bases, whose ops have the same signatures. CHORUS_C10D_BACKEND asks for the Backend form under
// 1.13, whose c10d::Backend already has 2.x's interface: the build compiles it so (a check; 1.13's
// Python cannot run a Backend).
#if TORCH_VERSION_MAJOR >= 2 || defined(CHORUS_C10D_BACKEND)
#include <torch/csrc/distributed/c10d/Backend.hpp>
#define CHORUS_C10D_BASE c10d::Backend
#else
#define CHORUS_C10D_BASE c10d::ProcessGroup
#endif

#include <chorus/peer.hpp>

#include "join.hpp"

namespace chorus::python {

using C10dBase = CHORUS_C10D_BASE;

class ProcessGroupChorus : public C10dBase {
 public:
  // `timeout`: the group's (new_group's), for every op that gives none of its own; zero: the
  // world's (init_process_group's, the collective's Config::timeout).
  ProcessGroupChorus(std::shared_ptr<World> world, Peer peer, std::chrono::milliseconds timeout = {});
  const std::string getBackendName() const override { return "chorus"; }
  // The chorus handle this group runs on, and the collective it is in (chorus.shrink and friends).
  Peer peer() const { return peer_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  const std::shared_ptr<World>& world() const { return world_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  // dist.all_gather_coalesced: one all_gather of every input, flat; output_lists[r][i] gets rank
  // r's input i. The inputs share a dtype and a device.
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& output_lists,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  // dist.recv / irecv without src: the first send to this rank with the tag, from any rank; the
  // Work's sourceRank() names it.
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

 private:
  // Block j of `in` to rank j and block j of `out` from rank j, as point-to-point ops on a tag
  // of their own (blocks may differ in size: alltoall with split sizes, or a list of tensors).
  std::vector<chorus::Work> exchange(const std::vector<at::Tensor>& out_blocks, const std::vector<at::Tensor>& in_blocks,
                                     std::chrono::milliseconds timeout);

  // An op's timeout: its own (torch's options; unset is -1), else the group's.
  std::chrono::milliseconds op_timeout(std::chrono::milliseconds own) const {
    return own.count() > 0 ? own : timeout_;
  }

  std::shared_ptr<World> world_;
  Peer peer_;
  std::chrono::milliseconds timeout_;
  // Ops are matched across ranks by the order they are called in: two threads calling at once
  // are put in one order here (issuing an op does not wait for it).
  std::mutex issue_mu_;
  uint64_t exchanges_ = 0;  // under issue_mu_: every rank counts its exchanges alike
};

} // namespace chorus::python
