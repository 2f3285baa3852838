// GlobalClient's table of the ops in flight: an op's NetOp exists from whichever comes first (this
// node's peers all calling it, or a frame of it from another node) until this node's peers have
// all concluded it, or it timed out here before they all called; frames that come later for a
// finished op are dropped.
#include "actors/global_client/global_client.hpp"

#include <algorithm>

#include "actors/global_client/net_op.hpp"
#include "messages/data_codec.hpp"

namespace chorus {

std::shared_ptr<NetOp> GlobalClient::op_for(uint32_t group, uint64_t seq, bool create) {
  std::lock_guard<std::mutex> lk(mu_);
  const auto key = std::make_pair(group, seq);
  auto it = ops_.find(key);
  if (it != ops_.end()) return it->second;
  if (!create || closed_ || done_.count(key)) return nullptr;
  auto op = std::make_shared<NetOp>(shared_from_this(), group, seq, topo_.num_nodes, lost_, left_);
  ops_.emplace(key, op);
  return op;
}

std::string GlobalClient::op_waits_for(uint32_t group, uint64_t seq) {
  auto op = op_for(group, seq, false);
  return op ? op->waiting_for() : std::string();  // NetOp::mu_ without ours (the lock order)
}

void GlobalClient::set_data_wait_hook(DataWaitHook hook) {
  std::lock_guard<std::mutex> lk(hook_mu_);
  data_wait_hook_ = std::move(hook);
  has_data_wait_hook_.store(static_cast<bool>(data_wait_hook_), std::memory_order_release);
}

void GlobalClient::before_data_wait(uint32_t group, uint64_t seq) {
  if (!has_data_wait_hook_.load(std::memory_order_acquire)) return;
  DataWaitHook hook;
  {
    std::lock_guard<std::mutex> lk(hook_mu_);
    hook = data_wait_hook_;
  }
  if (hook) hook(group, seq);  // not under a lock: it may stop the process
}

std::vector<uint32_t> GlobalClient::op_nodes(const std::vector<uint32_t>& members) const {
  std::vector<uint32_t> nodes = rank_nodes(members);
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  return nodes;
}

void GlobalClient::tell_stragglers(uint32_t group, uint64_t seq, const std::vector<uint32_t>& members,
                                   const std::vector<uint32_t>& ranks) {
  tell_nodes(FrameType::stragglers, group, seq, encode_stragglers(ranks), op_nodes(members));
}

void GlobalClient::tell_never_called(uint32_t group, uint64_t seq, const std::vector<uint32_t>& members,
                                     const Status& why) {
  tell_nodes(FrameType::gave_up, group, seq, encode_leaving(why), op_nodes(members), kNeverLaunched);
  finished(group, seq);
}

bool GlobalClient::holds(uint32_t group, uint64_t seq) const {
  std::lock_guard<std::mutex> lk(mu_);
  return ops_.count(std::make_pair(group, seq)) != 0;
}

std::optional<Status> GlobalClient::given_up(uint32_t group, uint64_t seq) {
  auto op = op_for(group, seq, false);
  return op ? op->given_up() : std::nullopt;  // NetOp::mu_ without ours (the lock order)
}

void GlobalClient::tell_nodes(FrameType type, uint32_t group, uint64_t seq, const std::string& body,
                              const std::vector<uint32_t>& nodes, uint32_t slot) {
  if (!meshed_.load(std::memory_order_acquire)) return;
  FrameHeader h = frame_header(type);
  h.group = group;
  h.seq = seq;
  h.slot = slot;
  for (uint32_t n : nodes)
    if (n != topo_.node_id && conns_[n]) conns_[n]->send(SendTicket::owning(h, body));
}

void GlobalClient::note_failure(uint32_t group, uint64_t seq, const Status& why) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!first_failure_) first_failure_ = Failure{group, seq, why};
}

void GlobalClient::set_status_source(std::function<Envelope()> source) {
  if (orchestrator_.session) orchestrator_.session->set_status_source(std::move(source));
}

void GlobalClient::finished(uint32_t group, uint64_t seq) {
  std::shared_ptr<NetOp> op;  // released after unlocking
  std::lock_guard<std::mutex> lk(mu_);
  const auto key = std::make_pair(group, seq);
  if (auto it = ops_.find(key); it != ops_.end()) {
    op = std::move(it->second);
    ops_.erase(it);
  }
  // Within a group ops finish in sequence: hinted at the end, the insert walks no tree.
  const std::size_t before = done_.size();
  done_.emplace_hint(done_.end(), key);
  if (done_.size() != before) done_order_.push_back(key);
  if (done_order_.size() > 4096) {  // remember enough recent ops to drop their late frames
    for (std::size_t i = 0; i < 2048; ++i) done_.erase(done_order_[i]);
    done_order_.erase(done_order_.begin(), done_order_.begin() + 2048);
  }
}

std::shared_ptr<RemoteSteps> GlobalClient::begin_op(uint32_t group, uint64_t seq, OpAnnouncement mine,
                                                    Clock::time_point deadline, std::string label,
                                                    std::vector<uint32_t> rank_node, uint32_t local_members,
                                                    const std::vector<bool>& reached) {
  auto op = op_for(group, seq, true);
  if (!op) {  // closing, or a sequence number reused
    op = std::make_shared<NetOp>(shared_from_this(), group, seq, topo_.num_nodes,
                                 Status(Errc::reset, label + ": the node is shutting down"),
                                 std::vector<std::pair<uint32_t, Status>>{});
  }
  const bool failed = !mine.status.is_ok();
  std::vector<bool> seen(topo_.num_nodes, false);
  std::vector<uint32_t> tell;
  for (uint32_t n : rank_node)
    if (n != topo_.node_id && !seen[n]) {
      seen[n] = true;
      if (!(n < reached.size() && reached[n]) || failed) tell.push_back(n);
    }
  mine.node = topo_.node_id;
  FrameHeader h = frame_header(FrameType::announce);
  h.group = group;
  h.seq = seq;
  std::string body = encode_announcement(mine);
  op->launch(std::move(mine), deadline, std::move(label), local_members, std::move(rank_node), h, std::move(body),
             std::move(tell));
  // Our peers will not run this op: the others must hear why at once.
  if (failed) op->flush();
  return op;
}

} // namespace chorus
