// Hierarchical schedules for peers spread over nodes (several peers per node), for all_reduce,
// reduce and broadcast: each node has a leader (the op's root on the root's node, else the node's
// lowest rank), and only the leaders talk across nodes, with any flat schedule among themselves.
//   all_reduce  the node's peers hand their buffers to the leader, which reduces them in one fused
//               pass through memory; the leaders all-reduce; each leader hands the result back.
//   reduce      the same first step; the leaders reduce to the root.
//   broadcast   the leaders broadcast from the root; each leader hands the data to its peers.
// The network carries the leaders' op only: with two nodes a flat ring all-reduce over 2k peers
// moves 2(2k-1)/2k of the buffer across the node boundary each way, this moves 1. Every peer of an
// all-reduce ends bit-identical: leaders agree through the inner schedule, the others copy.
#include <map>
#include <stdexcept>

#include "strategies/schedule_builders.hpp"

namespace chorus {

std::vector<Program> hierarchical_schedule(const ScheduleParams& p, const std::vector<int>& node_of) {
  const bool reduces = p.op == OpKind::all_reduce || p.op == OpKind::reduce;
  if (!reduces && p.op != OpKind::broadcast)
    throw std::invalid_argument("hierarchical_schedule: all_reduce, reduce and broadcast only");
  if (static_cast<int>(node_of.size()) != p.n) throw std::invalid_argument("hierarchical_schedule: node_of size");
  if (p.root < 0 || p.root >= p.n) throw std::invalid_argument("hierarchical_schedule: root out of range");
  std::vector<Program> programs(static_cast<std::size_t>(p.n));
  if (p.count == 0) return programs;
  const bool rooted = p.op != OpKind::all_reduce;
  // Leaders in rank order of their nodes' first appearance, and each rank's leader.
  std::map<int, int> leader_of_node;
  if (rooted) leader_of_node[node_of[p.root]] = p.root;
  for (int r = 0; r < p.n; ++r) leader_of_node.emplace(node_of[r], r);
  std::vector<int> leaders, leader(static_cast<std::size_t>(p.n));
  std::map<int, int> seen;
  for (int r = 0; r < p.n; ++r) {
    leader[r] = leader_of_node[node_of[r]];
    if (seen.emplace(node_of[r], 0).second) leaders.push_back(leader[r]);
  }
  auto locals = [&](int l) {
    std::vector<int> rs;
    for (int r = 0; r < p.n; ++r)
      if (r != l && leader[r] == l) rs.push_back(r);
    return rs;
  };
  // 1. Reductions: the node's peers hand their buffers to the leader (one round, one region, so
  // the leader reduces them in one fused pass).
  if (reduces)
    for (int l : leaders) {
      Round in;
      for (int r : locals(l)) {
        programs[r].push_back(Round{{Step{StepKind::send, l, 0, p.count}}});
        in.steps.push_back(Step{StepKind::recv_reduce, r, 0, p.count});
      }
      if (!in.steps.empty()) programs[l].push_back(std::move(in));
    }
  // 2. The leaders' op, virtual rank v being leaders[v].
  ScheduleParams inner = p;
  inner.n = static_cast<int>(leaders.size());
  inner.root = 0;
  for (std::size_t v = 0; v < leaders.size(); ++v)
    if (leaders[v] == leader[p.root]) inner.root = static_cast<int>(v);
  const auto among = make_schedule(inner);
  for (std::size_t v = 0; v < leaders.size(); ++v)
    for (Round round : among[v]) {
      for (Step& s : round.steps)
        if (s.peer >= 0) s.peer = leaders[static_cast<std::size_t>(s.peer)];
      programs[leaders[v]].push_back(std::move(round));
    }
  // 3. Results back to the node's peers (not for reduce: only the root holds one).
  if (p.op != OpKind::reduce)
    for (int l : leaders) {
      Round out;
      for (int r : locals(l)) {
        out.steps.push_back(Step{StepKind::send, r, 0, p.count});
        programs[r].push_back(Round{{Step{StepKind::recv_copy, l, 0, p.count}}});
      }
      if (!out.steps.empty()) programs[l].push_back(std::move(out));
    }
  return programs;
}

} // namespace chorus
