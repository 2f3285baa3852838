// Hierarchical schedules for peers spread over nodes (several peers per node): each node has a
// leader (the op's root on the root's node, else the node's lowest rank), and only the leaders
// talk across nodes.
//   all_reduce      the node's peers hand their buffers to the leader, which reduces them in one
//                   fused pass through memory; the leaders all-reduce (any flat schedule); each
//                   leader hands the result back.
//   reduce          the same first step; the leaders reduce to the root.
//   broadcast       the leaders broadcast from the root; each leader hands the data to its peers.
//   all_gather      the leader collects its node's blocks; leaders send them to every other
//                   leader in one round; each leader hands every block back to its peers.
//   reduce_scatter  the leader reduces its node's whole buffers; leaders send every other node the
//                   partial sums of that node's blocks, which it reduces; each leader hands every
//                   peer of its node its block.
// The network carries the leaders' op only: with two nodes a flat ring all-reduce over 2k peers
// moves 2(2k-1)/2k of the buffer across the node boundary each way, this moves 1. Every peer of an
// all-reduce ends bit-identical: leaders agree through the inner schedule, the others copy.
#include <map>
#include <stdexcept>

#include "strategies/schedule_builders.hpp"

namespace chorus {

namespace {

// The blocks of `ranks` (ascending) as runs of consecutive ranks: one range per run.
std::vector<detail::Range> runs(const std::vector<int>& ranks, std::size_t count) {
  std::vector<detail::Range> out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i + 1;
    while (j < ranks.size() && ranks[j] == ranks[j - 1] + 1) ++j;
    out.push_back({static_cast<std::size_t>(ranks[i]) * count, (j - i) * count});
    i = j;
  }
  return out;
}

// all_gather and reduce_scatter (work buffers of n blocks), in three rounds per peer.
std::vector<Program> hierarchical_blocks(const ScheduleParams& p, const std::vector<int>& leader,
                                         const std::vector<int>& leaders) {
  const int n = p.n;
  const std::size_t c = p.count;
  const bool gather = p.op == OpKind::all_gather;
  std::vector<Program> programs(static_cast<std::size_t>(n));
  std::map<int, std::vector<int>> node_ranks;  // leader -> its node's ranks, ascending
  for (int r = 0; r < n; ++r) node_ranks[leader[r]].push_back(r);
  auto add = [](Round& rd, StepKind k, int peer, detail::Range x) {
    if (x.count) rd.steps.push_back(Step{k, peer, x.offset, x.count});
  };
  const detail::Range all{0, static_cast<std::size_t>(n) * c};
  // 1. Into the leader: all_gather collects each peer's block, reduce_scatter sums whole buffers.
  for (int l : leaders) {
    Round in;
    for (int r : node_ranks[l]) {
      if (r == l) continue;
      const detail::Range what = gather ? detail::Range{static_cast<std::size_t>(r) * c, c} : all;
      Round out;
      add(out, StepKind::send, l, what);
      programs[r].push_back(std::move(out));
      add(in, gather ? StepKind::recv_copy : StepKind::recv_reduce, r, what);
    }
    if (!in.steps.empty()) programs[l].push_back(std::move(in));
  }
  // 2. Between leaders, one round: all_gather sends my node's blocks and receives theirs;
  // reduce_scatter sends each node the partial sums of its blocks and reduces those of mine.
  for (int l : leaders) {
    Round x;
    for (int m : leaders) {
      if (m == l) continue;
      for (const auto& r : runs(node_ranks[gather ? l : m], c)) add(x, StepKind::send, m, r);
    }
    for (int m : leaders) {
      if (m == l) continue;
      for (const auto& r : runs(node_ranks[gather ? m : l], c))
        add(x, gather ? StepKind::recv_copy : StepKind::recv_reduce, m, r);
    }
    if (!x.steps.empty()) programs[l].push_back(std::move(x));
  }
  // 3. Back to the node's peers: every other block (all_gather) or the peer's own (reduce_scatter).
  for (int l : leaders) {
    Round out;
    for (int r : node_ranks[l]) {
      if (r == l) continue;
      Round in;
      std::vector<detail::Range> what;
      if (gather) {
        what.push_back({0, static_cast<std::size_t>(r) * c});
        what.push_back({static_cast<std::size_t>(r + 1) * c, static_cast<std::size_t>(n - r - 1) * c});
      } else {
        what.push_back({static_cast<std::size_t>(r) * c, c});
      }
      for (const auto& w : what) {
        add(out, StepKind::send, r, w);
        add(in, StepKind::recv_copy, l, w);
      }
      if (!in.steps.empty()) programs[r].push_back(std::move(in));
    }
    if (!out.steps.empty()) programs[l].push_back(std::move(out));
  }
  return programs;
}

} // namespace

std::vector<Program> hierarchical_schedule(const ScheduleParams& p, const std::vector<int>& node_of) {
  const bool reduces = p.op == OpKind::all_reduce || p.op == OpKind::reduce;
  const bool blocks = p.op == OpKind::all_gather || p.op == OpKind::reduce_scatter;
  if (!reduces && !blocks && p.op != OpKind::broadcast)
    throw std::invalid_argument("hierarchical_schedule: all_reduce, reduce, broadcast, all_gather, reduce_scatter only");
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
  if (blocks) return hierarchical_blocks(p, leader, leaders);
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
