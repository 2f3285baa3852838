#include "strategies/planner.hpp"

#include <algorithm>

#include "core/settings.hpp"
#include "strategies/arena_ops.hpp"
#include "strategies/plan_rules.hpp"
#include "strategies/schedule.hpp"

namespace chorus {

namespace {

using P = RunStrategy::Path;

// The most any peer posts into its slot (a rooted op's root posts more, or less, than the others).
std::size_t arena_need(const PlanQuery& q) {
  const auto n = static_cast<uint32_t>(std::max(1, q.topology.peers));
  const auto root = static_cast<uint32_t>(q.root);
  std::size_t most = 0;
  for (uint32_t rank : {root, (root + 1) % n}) most = std::max(most, arena_input_bytes(ArenaOp{q, n, rank}));
  return most;
}

// The rounds and messages of the host schedule `s` runs (as the local server builds it).
void count_schedule(const PlanQuery& q, const RunStrategy& s, PlanDecision& d) {
  const ScheduleParams p = plan_schedule(q, q.topology.peers, s);
  for (const Program& prog : schedule_of(s, p, q.topology)) {
    d.rounds = std::max(d.rounds, prog.size());
    for (const Round& r : prog)
      for (const Step& st : r.steps)
        if (st.kind == StepKind::send) {
          ++d.messages;
          d.largest_message = std::max(d.largest_message, st.count * p.elem_size);
        }
  }
}

void say(std::string* why, const char* s) {
  if (why && *s) *why += (why->empty() ? "" : "; ") + std::string(s);
}
void say(std::string* why, const std::string& s) { say(why, s.c_str()); }

std::string counted(std::size_t n, const char* what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); }

// The host schedule's strategy: the spread table, then the algorithm table (among the leaders,
// where the spread picked them).
RunStrategy host_schedule(const Config& c, const PlanQuery& q, const PlanFacts& route, std::string* why) {
  const PlanFacts op = schedule_facts(c, q, route, q.topology.peers, false);
  const Rule<Spread>& spread = first_rule(spread_rules(), q.kind, op.set);
  const int n = spread.pick == Spread::leaders_per_host ? op.hosts : spread.pick == Spread::leaders_per_node ? op.nodes : op.peers;
  const PlanFacts f = spread.pick == Spread::flat ? op : schedule_facts(c, q, op, n, true);
  const Rule<AlgorithmPick>& rule = first_rule(algorithm_rules(), q.kind, f.set);
  if (why) *why += words(spread.why, op) + words(rule.why, f);
  const AlgorithmPick& a = rule.pick;
  const Strategy s = a.configured ? level_choice(c, q).fixed : Strategy{a.algorithm, a.arity == 0 ? c.auto_tree_arity : a.arity};
  switch (spread.pick) {
    case Spread::leaders_per_host: return RunStrategy::among_hosts(s);
    case Spread::leaders_per_node: return RunStrategy::among_leaders(s);
    case Spread::flat: break;
  }
  return RunStrategy::flat(s);
}

Route route_of(const PlanQuery& q, const PlanFacts& f) {
  Route r;
  r.meet = first_rule(meet_rules(), q.kind, f.set).pick;
  // Only GPU tensors across nodes are ever staged: host ops need not read the path table here.
  if (q.on_device && !q.topology.shared_memory) r.staged = first_rule(path_rules(), q.kind, f.set).pick.staged;
  return r;
}

RunStrategy path_of(const Config& config, const PlanQuery& q, const PlanFacts& f, std::string* why) {
  const Rule<PathPick>& rule = first_rule(path_rules(), q.kind, f.set);
  say(why, rule.why);
  if (rule.pick.path != P::schedule) return RunStrategy::of(rule.pick.path);
  if (!why) return host_schedule(config, q, f, nullptr);
  std::string rest;
  const RunStrategy s = host_schedule(config, q, f, &rest);
  say(why, rest);
  return s;
}

} // namespace

bool device_through_nccl(const StrategyChoice& choice, bool nccl_takes) {
  PlanFacts f;
  f.set = bit(Fact::gpu) | (nccl_takes ? Fact::distinct_gpus | Fact::nccl_serves : 0) |
          (auto_or_nccl(choice) ? 0 : bit(Fact::configured));
  return first_rule(path_rules(), OpKind::all_reduce, f.set).pick.path == P::nccl;
}

bool plan_p2p_eager(std::size_t bytes) {
  static const uint64_t most = tuned_number(SettingId::p2p_eager_message_kib) * 1024;
  return bytes <= most;
}

bool plan_pair_copy_at_pairing(std::size_t bytes) {
  static const uint64_t most = tuned_number(SettingId::p2p_local_eager_kib) * 1024;
  return bytes <= most;
}

ScheduleParams plan_schedule(const OpDesc& op, int peers, const RunStrategy& s) {
  ScheduleParams p{op.kind, s.strategy, peers, op.root, op.count, dtype_size(op.dtype)};
  // One size for every op: the local server's schedule caches are keyed by the op and its strategy
  // alone, so a chunk that varied with anything else would have to join their keys.
  p.chunk_bytes = kPipelineChunkBytes;
  return p;
}

Route plan_route(const Config& config, const PlanQuery& q) { return route_of(q, route_facts(config, q)); }

std::size_t plan_pack_bytes(const Config& config, const PlanQuery& q) {
  // The arena meets host ops only, and only with a slot.
  return plan_route(config, q).meet == P::arena ? q.arena_slot : std::size_t{1} << 20;
}

RunStrategy plan_path(const Config& config, const PlanQuery& q, std::string* why) {
  return path_of(config, q, route_facts(config, q), why);
}

PlanDecision plan_op(const Config& config, const PlanQuery& q) {
  PlanDecision d;
  const PlanFacts f = route_facts(config, q);  // once: the route, the meeting's words and the path read it
  const Route r = route_of(q, f);
  d.first = r.meet;
  d.staged = r.staged;
  if (r.meet == P::arena) {
    // Every peer posts its call; where it does not fit the slot, all of them see so and go on.
    const std::size_t need = arena_need(q);
    const bool fits = need <= q.arena_slot;
    if (!fits) d.first = P::none;
    say(&d.why, std::to_string(need) + " B " + (fits ? "fit" : "do not fit") + " the arena's slot of " +
                    std::to_string(q.arena_slot) + " B");
  } else {
    say(&d.why, first_rule(meet_rules(), q.kind, f.set).why);
  }
  d.path = path_of(config, q, f, &d.why);
  const std::size_t bytes = q.count * dtype_size(q.dtype);
  if (d.path.path == P::p2p && !q.topology.shared_memory)
    say(&d.why, std::to_string(bytes) + " B" +
                    (plan_p2p_eager(bytes) ? " go with the header where the receiving node's window has room, else "
                                             "wait for the receive's pull"
                                           : " wait for the receive's pull (above the eager limit)"));
  else if (d.path.path == P::p2p && !q.on_device)
    say(&d.why, std::to_string(bytes) + " B, copied " +
                    (plan_pair_copy_at_pairing(bytes) ? "by the second of the pair to arrive, as it pairs them"
                                                      : "by the receiver's thread (above the eager limit in one process)"));
  if (d.path.path == RunStrategy::Path::schedule) count_schedule(q, d.path, d);
  return d;
}

void log_plan(const Config& config, const PlanQuery& q, const LogWhere& where, const std::string& label) {
  if (!log_on(LogLevel::trace, Subsys::op)) return;
  log_line(LogLevel::trace, Subsys::op, where, label + ": planned " + to_string(plan_op(config, q)));
}

std::string to_string(const PlanDecision& d) {
  std::string s;
  if (d.first != RunStrategy::Path::none) s += to_string(RunStrategy::of(d.first)) + ", else ";
  s += to_string(d.path);
  if (d.staged) s += " (staged)";
  if (d.path.path == RunStrategy::Path::schedule)
    s += " (" + counted(d.rounds, "round") + ", " + counted(d.messages, "message") +
         (d.largest_message ? ", the largest " + std::to_string(d.largest_message) + " B" : "") + ")";
  return s + ": " + d.why;
}

} // namespace chorus
