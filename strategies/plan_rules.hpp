// The planner's rules, as data. Four tables, each read top to bottom: the first row whose kinds
// include the op's and whose every asked fact holds decides (NCCL's tuning.cc is the model: the
// choices in one place, read as a table, not spread as branches). A row asks each fact `yes`,
// `no` or not at all; the facts of an op are worked out once from its description, the
// configuration and where its peers are (route_facts, schedule_facts). Every table ends with a row that asks
// nothing, so every op finds one. planner.cpp runs them; tests/plan_rules_test.cpp checks them as
// plain data; chorus-bench --rules prints them.
//
//   meet       where the op meets first: the arena, a device lead, CUDA IPC, or nowhere
//   path       what runs it once its peers have met: a host schedule (staged or not), p2p, NCCL
//              or the on-device plan
//   spread     a host schedule across nodes: flat, or one leader per node or per host
//   algorithm  the host schedule's algorithm (among the leaders, where spread picked them)
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include <chorus/config.hpp>

#include "strategies/planner.hpp"

namespace chorus {

enum class Fact : uint8_t {
  gpu,             // the op's tensors are on a GPU
  across,          // its peers are node processes (a network level), not threads of one process
  arena,           // it may meet in an arena: the world's op, its root not found from its data,
                   // its strategy auto at its level, an arena mapped
  arena_across,    // that arena spans node processes of one host
  configured,      // a host strategy is named for its kind at its level (neither auto nor nccl)
  nccl_named,      // nccl is named for its kind at its level
  nccl_serves,     // NCCL has it for its dtype and reduce op
  distinct_gpus,   // GPU tensors of one process: two peers or more, each on a GPU of its own
  every_node_gpu,  // every node hosting a rank of it registered a GPU
  one_peer,
  small,           // its bytes (all-gather, reduce-scatter: the whole buffer) below Config::auto_threshold_bytes
  small_inflow,    // the bytes one peer takes in from the n - 1 others below that threshold
  every_peer_a_node,
  crowded,         // node processes that outnumber some machine's hardware threads, and not a pair (n != 2)
  few_peers,       // at most kStarPeers peers
  hosts_shared,    // two hosts or more, some with several node processes that share its memory
  nodes_shared,    // two nodes or more, some with several peers
  count_
};
inline constexpr std::size_t kFactCount = static_cast<std::size_t>(Fact::count_);
const char* to_string(Fact f);

using FactSet = uint32_t;
constexpr FactSet bit(Fact f) { return FactSet{1} << static_cast<unsigned>(f); }
constexpr FactSet operator|(Fact a, Fact b) { return bit(a) | bit(b); }
constexpr FactSet operator|(FactSet a, Fact b) { return a | bit(b); }

using KindSet = uint16_t;
constexpr KindSet bit(OpKind k) { return static_cast<KindSet>(1u << static_cast<unsigned>(k)); }
constexpr KindSet operator|(OpKind a, OpKind b) { return bit(a) | bit(b); }
constexpr KindSet operator|(KindSet a, OpKind b) { return a | bit(b); }
inline constexpr KindSet kAnyKind = 0x7ff;  // the 11 kinds, all_reduce .. recv
static_assert(static_cast<unsigned>(OpKind::recv) == 10, "a new OpKind: widen kAnyKind and the tables' kinds");
inline constexpr KindSet kPairKinds = OpKind::send | OpKind::recv;
inline constexpr KindSet kCollectiveKinds = static_cast<KindSet>(kAnyKind & ~kPairKinds);

// One row: its name, the kinds it applies to, the facts it asks to hold (`yes`) and not to hold
// (`no`), what it picks, and why, in words. The words may name the op's numbers: {bytes},
// {threshold}, {inflow}, {peers}, {nodes} ("2 nodes"), {node_count}, {hosts}, {star}.
template <class Pick>
struct Rule {
  const char* name;
  KindSet kinds;
  FactSet yes;
  FactSet no;
  Pick pick;
  const char* why;
  bool matches(OpKind k, FactSet facts) const {
    return (kinds & bit(k)) != 0 && (facts & yes) == yes && (facts & no) == 0;
  }
};

// What the path table picks: a path (RunStrategy::Path::schedule: the spread and algorithm tables
// go on), and whether GPU tensors go through host memory for it.
struct PathPick {
  RunStrategy::Path path;
  bool staged;
};
enum class Spread : uint8_t { flat, leaders_per_node, leaders_per_host };
const char* to_string(Spread s);
// What the algorithm table picks: an algorithm and its arity (0: Config::auto_tree_arity), or,
// `configured`, the strategy named for the op's kind at its level.
struct AlgorithmPick {
  Algorithm algorithm;
  int arity;
  bool configured;
};

std::span<const Rule<RunStrategy::Path>> meet_rules();
std::span<const Rule<PathPick>> path_rules();
std::span<const Rule<Spread>> spread_rules();
std::span<const Rule<AlgorithmPick>> algorithm_rules();

template <class Pick>
const Rule<Pick>& first_rule(std::span<const Rule<Pick>> table, OpKind k, FactSet facts) {
  for (const auto& r : table)
    if (r.matches(k, facts)) return r;
  return table.back();  // never reached: every table ends with a row that asks nothing
}

// An op's facts, and the numbers its rules' words name.
struct PlanFacts {
  FactSet set = 0;
  int peers = 1;
  int nodes = 1;
  int hosts = 1;
  std::size_t bytes = 0;
  std::size_t inflow = 0;
  std::size_t threshold = 0;
  bool has(Fact f) const { return (set & bit(f)) != 0; }
};

// The strategy named for the op's kind at its level (Config::local or global); a pair's (send,
// recv: no strategy) is auto.
const StrategyChoice& level_choice(const Config& config, const PlanQuery& q);

// The facts the meet and path tables ask (cheap: asked for every op before it leaves its peer).
PlanFacts route_facts(const Config& config, const PlanQuery& q);
// With those, the facts of the host schedule over `peers` peers (the op's, or its leaders'): its
// size, its spread over nodes and hosts, crowding. `leaders`: one per node or host, each a node.
PlanFacts schedule_facts(const Config& config, const PlanQuery& q, PlanFacts f, int peers, bool leaders);

// A rule's words with the op's numbers in place of their names.
std::string words(const char* why, const PlanFacts& f);

// Every table, a row a line: name, kinds, the facts asked, the pick, the words (chorus-bench --rules).
std::string describe_rules();

} // namespace chorus
