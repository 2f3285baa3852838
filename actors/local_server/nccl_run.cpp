#include "actors/local_server/nccl_run.hpp"

#include <algorithm>
#include <cstring>
#include <map>

#include "actors/global_client/global_client.hpp"
#include "actors/global_client/net_op.hpp"
#include "cuda/nccl_job.hpp"

namespace chorus {

namespace {

// The id of the op's fresh communicator comes with the announcement of rank 0's node.
class AnnouncedId final : public gpu::NcclIdChannel {
 public:
  explicit AnnouncedId(const OpAnnouncement& maker) : maker_(maker) {}
  Status publish(const gpu::NcclKey&, uint64_t, const gpu::NcclId&) override { return Status::ok(); }
  Status await(const gpu::NcclKey&, uint64_t generation, Clock::time_point, gpu::NcclId& id) override {
    if (maker_.nccl_id.size() != id.size() || generation != maker_.nccl_last + 1)
      return {Errc::internal, "node " + std::to_string(maker_.node) + " announced the id of generation " +
                                  std::to_string(maker_.nccl_last + 1) + ", where the op builds generation " +
                                  std::to_string(generation)};
    std::memcpy(id.data(), maker_.nccl_id.data(), id.size());
    return Status::ok();
  }

 private:
  const OpAnnouncement& maker_;
};

} // namespace

Status announce_nccl(GlobalClient& global, uint32_t group, const std::vector<uint32_t>& rank_node,
                     const std::vector<NcclLocalRank>& mine, OpAnnouncement& a, std::vector<gpu::NcclRankOp>& parts) {
  Status error;
  gpu::NcclJob* job = global.nccl(error);
  if (!job) return error;
  const int gpus = gpu::nccl_calls()->device_count();
  gpu::NcclKey key;
  key.group = group;
  for (uint32_t n : rank_node) key.gpus.push_back({n, -1});
  std::vector<NcclLocalRank> ranks = mine;
  std::sort(ranks.begin(), ranks.end(), [](const auto& x, const auto& y) { return x.rank < y.rank; });
  for (const auto& r : ranks) {
    const std::string who = "rank " + std::to_string(r.rank);
    const Tensor& out = r.out.defined() ? r.out : r.in;
    for (const Tensor* t : {&r.in, &out}) {
      if (!t->defined()) continue;
      if (!t->is_cuda())
        return {Errc::device_mismatch, who + " passes a host tensor where this node's other peers pass GPU tensors "
                                             "(all peers of an op use one kind of device)"};
      if (t->device().index < 0 || t->device().index >= gpus)
        return {Errc::device_error,
                who + " passes a tensor on " + t->device().str() + ", but this machine has " + std::to_string(gpus) +
                    " CUDA device(s)"};
    }
    if (r.in.defined() && out.device() != r.in.device())
      return {Errc::device_mismatch,
              who + " passes its input on " + r.in.device().str() + " and its output on " + out.device().str()};
    const int device = (r.in.defined() ? r.in : out).device().index;
    key.gpus[static_cast<std::size_t>(r.rank)].device = device;
    a.devices.push_back(device);
    gpu::NcclRankOp p;
    p.rank = r.rank;
    p.in = r.in.defined() ? r.in.data() : nullptr;
    p.out = out.defined() ? out.data() : nullptr;
    parts.push_back(p);
  }
  const gpu::NcclAnnounce said = job->announce(key);
  a.gpu = true;
  a.nccl_live = said.live;
  a.nccl_last = said.last;
  if (!rank_node.empty() && rank_node.front() == global.node_id()) {
    gpu::NcclId id;
    if (Status s = job->spare_id(group, said.last + 1, id); !s.is_ok()) return s;
    a.nccl_id.assign(reinterpret_cast<const char*>(id.data()), id.size());
  }
  return Status::ok();
}

NcclRun::NcclRun(std::shared_ptr<GlobalClient> global, std::shared_ptr<NetOp> op, uint32_t group,
                 std::vector<uint32_t> rank_node, std::vector<gpu::NcclRankOp> parts, Clock::time_point deadline,
                 std::string label)
    : global_(std::move(global)),
      op_(std::move(op)),
      group_(group),
      rank_node_(std::move(rank_node)),
      parts_(std::move(parts)),
      deadline_(deadline),
      label_(std::move(label)) {}

Status NcclRun::join() {
  if (!started_.exchange(true)) {
    result_ = run();
    done_.set(1);
    return result_;
  }
  // The running peer returns soon after the deadline (the device actors give up then and the
  // job allows them 2 s to say why), so a little more slack suffices here.
  if (!done_.wait_at_least(1, deadline_ + std::chrono::seconds(3)))
    return {Errc::timeout, label_ + ": the NCCL op did not finish in time"};
  return result_;
}

Status NcclRun::run() {
  // Every node's announcement is here and they agree (the plan concluded without error).
  const auto all = op_->announcements();
  gpu::NcclKey key;
  key.group = group_;
  std::vector<gpu::NcclAnnounce> said;
  std::vector<std::size_t> next(all.size(), 0);  // per node: its next rank's place in `devices`
  for (uint32_t n : rank_node_) {
    if (n >= all.size() || !all[n] || next[n] >= all[n]->devices.size())
      return {Errc::internal, label_ + ": node " + std::to_string(n) + "'s announcement names too few GPUs"};
    key.gpus.push_back({n, all[n]->devices[next[n]++]});
  }
  // NCCL runs one rank per GPU (two on one GPU fail its setup): every node sees the same key and
  // gives the same answer before anyone calls NCCL.
  const auto& nodes = global_->topology().nodes;
  std::map<std::pair<uint32_t, int>, int> on;  // (host, device) -> the first rank there
  for (int r = 0; r < static_cast<int>(key.gpus.size()); ++r) {
    const auto& g = key.gpus[static_cast<std::size_t>(r)];
    const uint32_t host = g.node < nodes.size() ? nodes[g.node].host : g.node;
    auto [it, fresh] = on.emplace(std::make_pair(host, g.device), r);
    if (!fresh)
      return {Errc::invalid_argument,
              label_ + ": ranks " + std::to_string(it->second) + " and " + std::to_string(r) + " are both on cuda:" +
                  std::to_string(g.device) + " of one host (nodes " +
                  std::to_string(key.gpus[static_cast<std::size_t>(it->second)].node) + " and " +
                  std::to_string(g.node) + "); NCCL runs one rank per GPU: give each its own, or use auto (processes "
                  "sharing a GPU then run the op through CUDA IPC, where every peer calls within half the "
                  "timeout) or a host strategy, which stages GPU tensors through host memory"};
  }
  for (std::size_t n = 0; n < all.size(); ++n)
    if (all[n] && next[n] > 0) said.push_back({all[n]->nccl_live, all[n]->nccl_last});
  const uint64_t generation = gpu::NcclJob::agree(said);
  Status error;
  gpu::NcclJob* job = global_->nccl(error);
  if (!job) return {error.code(), label_ + ": " + error.message()};
  AnnouncedId ids(*all[rank_node_.front()]);
  Status s = job->run(key, generation, parts_, deadline_, ids);
  if (s.is_ok()) return s;
  // A lost node aborts the communicators: the op reports the loss, as every other op does.
  if (Status lost = global_->lost(); !lost.is_ok()) return {lost.code(), label_ + ": " + lost.message()};
  return {s.code(), label_ + ": " + s.message()};
}

} // namespace chorus
