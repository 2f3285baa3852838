// Hierarchical all-reduce for peers spread over nodes (several peers per node): each node's peers
// hand their buffers to the node's leader (its lowest rank), which reduces them in one fused pass
// through memory; the leaders all-reduce among themselves over the network with any flat schedule
// (ring, tree, one-shot, ...); each leader then hands the result back to its node's peers. The
// network carries the leaders' all-reduce only: with two nodes a flat ring over 2k peers moves
// 2(2k-1)/2k of the buffer across the node boundary each way, this moves 1 (the leaders' ring).
// Every peer ends bit-identical: leaders agree through the inner schedule, the others copy.
#include <map>
#include <stdexcept>

#include "strategies/schedule_builders.hpp"

namespace chorus {

std::vector<Program> hierarchical_all_reduce(const ScheduleParams& p, const std::vector<int>& node_of) {
  if (p.op != OpKind::all_reduce) throw std::invalid_argument("hierarchical_all_reduce: all_reduce only");
  if (static_cast<int>(node_of.size()) != p.n) throw std::invalid_argument("hierarchical_all_reduce: node_of size");
  std::vector<Program> programs(static_cast<std::size_t>(p.n));
  if (p.count == 0) return programs;
  // Leaders in order of first appearance (the lowest rank of each node), and each rank's leader.
  std::map<int, int> leader_of_node;
  std::vector<int> leaders, leader(static_cast<std::size_t>(p.n));
  for (int r = 0; r < p.n; ++r) {
    auto [it, fresh] = leader_of_node.emplace(node_of[r], r);
    if (fresh) leaders.push_back(r);
    leader[r] = it->second;
  }
  const Step whole_send{StepKind::send, 0, 0, p.count};
  // 1. Gather-reduce at each leader: one round, all receives into one region (fusable).
  for (int r = 0; r < p.n; ++r) {
    if (leader[r] == r) continue;
    Step s = whole_send;
    s.peer = leader[r];
    programs[r].push_back(Round{{s}});
  }
  for (int l : leaders) {
    Round in;
    for (int r = 0; r < p.n; ++r)
      if (r != l && leader[r] == l) in.steps.push_back(Step{StepKind::recv_reduce, r, 0, p.count});
    if (!in.steps.empty()) programs[l].push_back(std::move(in));
  }
  // 2. The leaders' all-reduce, virtual rank v being leaders[v].
  ScheduleParams inner = p;
  inner.n = static_cast<int>(leaders.size());
  inner.root = 0;
  const auto among = make_schedule(inner);
  for (std::size_t v = 0; v < leaders.size(); ++v)
    for (Round round : among[v]) {
      for (Step& s : round.steps)
        if (s.peer >= 0) s.peer = leaders[static_cast<std::size_t>(s.peer)];
      programs[leaders[v]].push_back(std::move(round));
    }
  // 3. Each leader hands the result to its node's peers.
  for (int l : leaders) {
    Round out;
    for (int r = 0; r < p.n; ++r)
      if (r != l && leader[r] == l) {
        Step s = whole_send;
        s.peer = r;
        out.steps.push_back(s);
      }
    if (!out.steps.empty()) programs[l].push_back(std::move(out));
  }
  for (int r = 0; r < p.n; ++r)
    if (leader[r] != r) programs[r].push_back(Round{{Step{StepKind::recv_copy, leader[r], 0, p.count}}});
  return programs;
}

} // namespace chorus
