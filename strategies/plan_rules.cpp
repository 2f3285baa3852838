#include "strategies/plan_rules.hpp"

#include <algorithm>
#include <array>
#include <map>

namespace chorus {

namespace {

using F = Fact;
using P = RunStrategy::Path;
constexpr FactSet none = 0;
constexpr KindSet kLeaderKinds = OpKind::all_reduce | OpKind::all_gather | OpKind::reduce_scatter;
// NCCL across nodes: a barrier is a host op there (one NCCL communicator over every rank would
// have to exist for nothing).
constexpr KindSet kNcclAcrossKinds = static_cast<KindSet>(kCollectiveKinds & ~bit(OpKind::barrier));

// Where the op meets first. The meeting runs it where every peer agrees, fits and comes in time;
// else it goes on as the path table says.
constexpr std::array<Rule<P>, 4> kMeet{{
    {"arena", kCollectiveKinds, bit(F::arena), bit(F::gpu), P::arena,
     "host tensors of peers sharing memory meet in the arena first"},
    {"device lead", kCollectiveKinds, F::arena | F::gpu, bit(F::across), P::device,
     "peers of one process meet first; where their buffers lie on one GPU a lead runs the op"},
    {"cuda ipc", kCollectiveKinds, F::arena | F::gpu | F::arena_across, none, P::cuda_ipc,
     "node processes sharing the GPU meet in the arena first (one lead's plan over every buffer)"},
    {"nowhere", kAnyKind, none, none, P::none, ""},
}};

// What runs the op once its peers have met.
constexpr std::array<Rule<PathPick>, 14> kPath{{
    {"pair, staged", kPairKinds, F::gpu | F::across, none, {P::p2p, true},
     "GPU tensors across nodes: staged through host memory, then a copy between the pair"},
    {"pair on GPUs", kPairKinds, bit(F::gpu), none, {P::p2p, false}, "GPU tensors of one process: a device copy between the pair"},
    {"pair", kPairKinds, none, none, {P::p2p, false}, "a copy between the pair"},
    {"nccl, one process", kAnyKind, F::gpu | F::distinct_gpus | F::nccl_serves, F::across | F::configured, {P::nccl, false},
     "every peer on a GPU of its own and NCCL serves the op (unless a peer's input and output overlap other than in "
     "place: then the on-device plan)"},
    {"device, one peer", kAnyKind, F::gpu | F::one_peer, bit(F::across), {P::device, false}, "one peer: the on-device plan"},
    {"device, shared GPU", kAnyKind, bit(F::gpu), F::across | F::distinct_gpus, {P::device, false},
     "peers share a GPU: the on-device plan"},
    {"device, no nccl", kAnyKind, bit(F::gpu), F::across | F::nccl_serves, {P::device, false},
     "NCCL cannot serve the op: the on-device plan"},
    {"device", kAnyKind, bit(F::gpu), bit(F::across), {P::device, false}, "a host strategy is configured: the on-device plan"},
    {"nccl named", kNcclAcrossKinds, F::gpu | F::across | F::nccl_serves | F::nccl_named, none, {P::nccl, false},
     "NCCL serves the op and is named for it"},
    {"nccl", kNcclAcrossKinds, F::gpu | F::across | F::nccl_serves | F::every_node_gpu, bit(F::configured), {P::nccl, false},
     "NCCL serves the op and every node has a GPU"},
    {"staged, configured", kAnyKind, F::gpu | F::across | F::configured, none, {P::schedule, true},
     "a host strategy is configured: staged through host memory"},
    {"staged, no nccl", kAnyKind, F::gpu | F::across, bit(F::nccl_serves), {P::schedule, true},
     "NCCL cannot serve the op: staged through host memory"},
    {"staged", kAnyKind, F::gpu | F::across, none, {P::schedule, true}, "some node has no GPU: staged through host memory"},
    {"host", kAnyKind, none, none, {P::schedule, false}, ""},
}};

// A host schedule: over every peer, or among one leader per node or per host (strategies/
// hierarchical.cpp), so that only the leaders' op crosses the network. Reduce and broadcast gain
// little there (a flat pipelined tree crosses a node boundary about once anyway) and lose the
// overlap of local and network steps: measured slower, left flat. A strategy named in the config
// runs flat, as named. Each row's words begin the algorithm's.
constexpr std::array<Rule<Spread>, 4> kSpread{{
    {"one process", kAnyKind, none, bit(F::across), Spread::flat, "one process: "},
    {"by host", kLeaderKinds, F::across | F::hosts_shared, bit(F::configured), Spread::leaders_per_host,
     "{hosts} hosts of {node_count} nodes: one leader per host; among them, "},
    {"by node", kLeaderKinds, F::across | F::nodes_shared, bit(F::configured), Spread::leaders_per_node,
     "{peers} peers on {nodes}: one leader per node; among them, "},
    {"flat", kAnyKind, none, none, Spread::flat, "{nodes}: "},
}};

// The host schedule's algorithm (the README and docs/benchmarks.md have the measurements):
//  - one process: centralized below the threshold (one hand-off in, one out), direct at or above
//    it (each peer reduces 1/n in one pass over all inputs, then copies the other parts: about 3x
//    the buffer per peer where the ring moves 5x, in 2 rounds instead of 2(n-1));
//  - across nodes, an all-reduce with every peer on a node of its own and a small inflow: one
//    exchange in which every peer folds every buffer (oneshot), instead of a tree's 2 log n hops;
//    where node processes crowd a machine's cores every message costs CPU time they all wait for,
//    and the n(n-1) messages of the one-shot lose to the 2(n-1) of a star (measured, 4 nodes on 2
//    cores, 1 KiB: about 105 us against 170-240 us), up to kStarPeers peers;
//  - across nodes otherwise: a tree of Config::auto_tree_arity below the threshold, the ring above.
constexpr AlgorithmPick pick(Algorithm a, int arity = 2) { return {a, arity, false}; }
constexpr std::array<Rule<AlgorithmPick>, 11> kAlgorithm{{
    {"configured", kAnyKind, bit(F::configured), none, {Algorithm::ring, 2, true}, "the configured strategy"},
    {"barrier", bit(OpKind::barrier), none, bit(F::across), pick(Algorithm::centralized), "a barrier"},
    {"one peer", kAnyKind, bit(F::one_peer), bit(F::across), pick(Algorithm::centralized), "one peer"},
    {"small", kAnyKind, bit(F::small), bit(F::across), pick(Algorithm::centralized),
     "{bytes} B < the threshold ({threshold} B)"},
    {"large", kAnyKind, none, bit(F::across), pick(Algorithm::direct), "{bytes} B >= the threshold ({threshold} B)"},
    {"one-shot", bit(OpKind::all_reduce), F::across | F::every_peer_a_node | F::small_inflow, F::one_peer | F::crowded,
     pick(Algorithm::oneshot), "an inflow of {inflow} B < the threshold, every peer a node"},
    {"star", bit(OpKind::all_reduce), F::across | F::every_peer_a_node | F::small_inflow | F::crowded | F::few_peers,
     bit(F::one_peer), pick(Algorithm::centralized),
     "an inflow of {inflow} B < the threshold, every peer a node, crowding the cores, up to {star} peers"},
    {"barrier, tree", bit(OpKind::barrier), none, none, pick(Algorithm::tree, 0), "a barrier"},
    {"one peer, tree", kAnyKind, bit(F::one_peer), none, pick(Algorithm::tree, 0), "one peer"},
    {"small, tree", kAnyKind, bit(F::small), none, pick(Algorithm::tree, 0), "{bytes} B < the threshold ({threshold} B)"},
    {"large, ring", kAnyKind, none, none, pick(Algorithm::ring), "{bytes} B >= the threshold ({threshold} B)"},
}};

// Ops whose per-peer count is one block of an n-block buffer are sized by the whole buffer.
std::size_t op_bytes(OpKind op, DType dtype, std::size_t count, int n) {
  std::size_t bytes = count * dtype_size(dtype);
  if (op == OpKind::all_gather || op == OpKind::reduce_scatter) bytes *= static_cast<std::size_t>(std::max(n, 1));
  return bytes;
}

void put(FactSet& s, Fact f, bool holds) {
  if (holds) s |= bit(f);
}

std::string kinds_text(KindSet k) {
  if (k == kAnyKind) return "any";
  if (k == kCollectiveKinds) return "collectives";
  if (k == kNcclAcrossKinds) return "collectives but barrier";
  std::string s;
  for (unsigned i = 0; i < 11; ++i)
    if (k & (1u << i)) s += (s.empty() ? "" : ",") + std::string(to_string(static_cast<OpKind>(i)));
  return s;
}

std::string facts_text(FactSet yes, FactSet no) {
  std::string s;
  for (const auto& [set, mark] : {std::pair{yes, ""}, std::pair{no, "!"}})
    for (std::size_t i = 0; i < kFactCount; ++i)
      if (set & bit(static_cast<Fact>(i))) s += (s.empty() ? "" : " ") + std::string(mark) + to_string(static_cast<Fact>(i));
  return s.empty() ? "-" : s;
}

std::string pick_text(P p) { return p == P::none ? "none" : p == P::schedule ? "host schedule" : to_string(RunStrategy::of(p)); }
std::string pick_text(const PathPick& p) { return pick_text(p.path) + (p.staged ? ", staged" : ""); }
std::string pick_text(Spread s) { return to_string(s); }
std::string pick_text(const AlgorithmPick& p) {
  if (p.configured) return "as configured";
  if (p.algorithm == Algorithm::tree && p.arity == 0) return "tree:auto_tree_arity";
  return to_string(Strategy{p.algorithm, p.arity});
}

template <class Pick>
void describe(std::string& out, const char* title, std::span<const Rule<Pick>> table) {
  out += std::string("# ") + title + "\n";
  for (const auto& r : table) {
    std::string line = "  " + std::string(r.name) + " | " + kinds_text(r.kinds) + " | " + facts_text(r.yes, r.no) +
                       " | " + pick_text(r.pick) + (r.why[0] ? " | " + std::string(r.why) : "");
    while (line.back() == ' ') line.pop_back();  // the spread's words end where the algorithm's begin
    out += line + "\n";
  }
}

} // namespace

// The strategy named for the op's kind at its level; a pair's (send, recv: no strategy) is auto.
const StrategyChoice& level_choice(const Config& c, const PlanQuery& q) {
  static const StrategyChoice pair{};
  const auto& choices = q.topology.shared_memory ? c.local : c.global;
  const auto k = static_cast<std::size_t>(q.kind);
  return k < choices.size() ? choices[k] : pair;
}

const char* to_string(Fact f) {
  switch (f) {
    case F::gpu: return "gpu";
    case F::across: return "across";
    case F::arena: return "arena";
    case F::arena_across: return "arena_across";
    case F::configured: return "configured";
    case F::nccl_named: return "nccl_named";
    case F::nccl_serves: return "nccl_serves";
    case F::distinct_gpus: return "distinct_gpus";
    case F::every_node_gpu: return "every_node_gpu";
    case F::one_peer: return "one_peer";
    case F::small: return "small";
    case F::small_inflow: return "small_inflow";
    case F::every_peer_a_node: return "every_peer_a_node";
    case F::crowded: return "crowded";
    case F::few_peers: return "few_peers";
    case F::hosts_shared: return "hosts_shared";
    case F::nodes_shared: return "nodes_shared";
    case F::count_: break;
  }
  return "?";
}

const char* to_string(Spread s) {
  switch (s) {
    case Spread::flat: return "flat";
    case Spread::leaders_per_node: return "leaders per node";
    case Spread::leaders_per_host: return "leaders per host";
  }
  return "?";
}

std::span<const Rule<P>> meet_rules() { return kMeet; }
std::span<const Rule<PathPick>> path_rules() { return kPath; }
std::span<const Rule<Spread>> spread_rules() { return kSpread; }
std::span<const Rule<AlgorithmPick>> algorithm_rules() { return kAlgorithm; }

PlanFacts route_facts(const Config& c, const PlanQuery& q) {
  PlanFacts f;
  const bool across = !q.topology.shared_memory;
  const StrategyChoice& choice = level_choice(c, q);
  FactSet& s = f.set;
  put(s, F::gpu, q.on_device);
  put(s, F::across, across);
  put(s, F::arena, q.arena_slot > 0 && q.group == 0 && !q.root_from_data && arena_allowed(c, q.kind, q.arena_across_nodes));
  put(s, F::arena_across, q.arena_across_nodes);
  put(s, F::configured, !auto_or_nccl(choice));
  put(s, F::nccl_named, !choice.is_auto && choice.fixed.algorithm == Algorithm::nccl);
  put(s, F::nccl_serves, q.nccl_serves);
  put(s, F::distinct_gpus, q.distinct_gpus && q.topology.peers >= 2);
  put(s, F::one_peer, q.topology.peers < 2);
  if (q.on_device && across) {
    // Read from the topology alone, so that every node decides alike: where some node of the op
    // has no GPU, every node stages, and the op still meets that node's host tensors.
    bool all = !q.topology.rank_node.empty();
    for (uint32_t node : q.topology.rank_node) all = all && node < q.topology.node_gpus.size() && q.topology.node_gpus[node] > 0;
    put(s, F::every_node_gpu, all);
  }
  f.peers = q.topology.peers;
  return f;
}

PlanFacts schedule_facts(const Config& c, const PlanQuery& q, PlanFacts f, int n, bool leaders) {
  const Topology& t = q.topology;
  FactSet& s = f.set;
  const FactSet sized = F::one_peer | F::small | F::small_inflow | F::every_peer_a_node | F::crowded | F::few_peers |
                        F::hosts_shared | F::nodes_shared;
  s &= ~sized;
  f.peers = n;
  f.threshold = c.auto_threshold_bytes;
  f.bytes = op_bytes(q.kind, q.dtype, q.count, n);
  f.inflow = f.bytes * static_cast<std::size_t>(n > 1 ? n - 1 : 1);
  put(s, F::one_peer, n < 2);
  put(s, F::small, f.bytes < c.auto_threshold_bytes);
  put(s, F::small_inflow, f.inflow < c.auto_threshold_bytes);
  put(s, F::few_peers, n <= kStarPeers);
  if (t.shared_memory) return f;
  if (!leaders) {
    // The op's nodes, and its memory domains (hosts whose processes share memory).
    std::vector<bool> seen;
    std::vector<uint32_t> domains;
    f.nodes = 0;
    for (uint32_t node : t.rank_node) {
      if (node >= seen.size()) seen.resize(node + 1, false);
      if (!seen[node]) seen[node] = true, ++f.nodes;
      const uint32_t d = node < t.node_domain.size() ? t.node_domain[node] : ~node;
      if (std::find(domains.begin(), domains.end(), d) == domains.end()) domains.push_back(d);
    }
    f.hosts = static_cast<int>(domains.size());
  }
  put(s, F::every_peer_a_node, leaders || f.nodes == n);
  put(s, F::crowded, crowded(t) && n != 2);
  put(s, F::hosts_shared, f.hosts >= 2 && f.hosts < f.nodes);
  put(s, F::nodes_shared, f.nodes >= 2 && f.nodes < n);
  return f;
}

std::string words(const char* why, const PlanFacts& f) {
  std::string out;
  for (const char* p = why; *p;) {
    if (*p != '{') {
      out += *p++;
      continue;
    }
    const char* end = p;
    while (*end && *end != '}') ++end;
    const std::string name(p + 1, end);
    if (name == "bytes") out += std::to_string(f.bytes);
    else if (name == "threshold") out += std::to_string(f.threshold);
    else if (name == "inflow") out += std::to_string(f.inflow);
    else if (name == "peers") out += std::to_string(f.peers);
    else if (name == "node_count") out += std::to_string(f.nodes);
    else if (name == "nodes") out += std::to_string(f.nodes) + (f.nodes == 1 ? " node" : " nodes");
    else if (name == "hosts") out += std::to_string(f.hosts);
    else if (name == "star") out += std::to_string(kStarPeers);
    else out += "{" + name + "}";
    p = *end ? end + 1 : end;
  }
  return out;
}

std::string describe_rules() {
  std::string out = "# the planner's rules (strategies/plan_rules.cpp): each table read top to bottom, the first row "
                    "that holds decides\n# name | kinds | facts asked (!: must not hold) | pick | words\n";
  describe(out, "meet: where the op meets first", meet_rules());
  describe(out, "path: what runs it once its peers have met", path_rules());
  describe(out, "spread: a host schedule across nodes", spread_rules());
  describe(out, "algorithm: the host schedule's (among the leaders, where spread picked them)", algorithm_rules());
  return out;
}

} // namespace chorus
