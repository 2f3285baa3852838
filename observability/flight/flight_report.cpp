#include "observability/flight/flight_report.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

namespace chorus {

namespace {

// A row with the time its process's dump was written (how long an op in flight has been there).
struct Seen {
  const FlightRow* row = nullptr;
  int64_t now_ns = 0;
  int64_t age_ns() const { return (row->exit_ns ? row->exit_ns : now_ns) - row->enter_ns; }
};

// Every group's collectives: group -> seq -> peer -> row (a peer's newest row wins if repeated).
using ByOp = std::map<uint32_t, std::map<uint64_t, std::map<uint32_t, Seen>>>;

// The job's peers as the dumps know them (-1: none says; older files).
int64_t world_of(const std::vector<FlightDump>& dumps) {
  int64_t world = -1;
  for (const FlightDump& d : dumps) world = std::max(world, d.world);
  return world;
}

ByOp collectives(const std::vector<FlightDump>& dumps) {
  ByOp by;
  for (const FlightDump& d : dumps)
    for (const FlightRow& r : d.rows)
      if (r.collective()) {
        Seen& s = by[r.op.group][r.op.seq][r.peer];
        if (!s.row || s.row->enter_ns <= r.enter_ns) s = Seen{&r, d.written_ns};
      }
  return by;
}

std::string duration(int64_t ns) {
  char b[32];
  if (ns < 1'000'000) std::snprintf(b, sizeof b, "%lldus", static_cast<long long>(ns / 1000));
  else if (ns < 1'000'000'000) std::snprintf(b, sizeof b, "%.1fms", ns / 1e6);
  else std::snprintf(b, sizeof b, "%.1fs", ns / 1e9);
  return b;
}

// Ends a table line without the padding of its last cell.
void end_line(std::string& out) {
  while (!out.empty() && out.back() == ' ') out.pop_back();
  out += '\n';
}


// The peers of each group and the window of sequence numbers every one of them still records.
struct Window {
  std::set<uint32_t> peers;
  uint64_t first = 0, last = 0;
  std::map<uint32_t, uint64_t> newest;  // by peer: its newest op (none for a peer that recorded none)
};

// Group 0 is the world: with `world` known, its peers are every rank, those that never called
// (or whose recorder is not among the dumps) included. Other groups' members are not recorded.
Window window_of(uint32_t group, const std::map<uint64_t, std::map<uint32_t, Seen>>& ops, int64_t world) {
  Window w;
  if (group == 0)
    for (int64_t p = 0; p < world; ++p) w.peers.insert(static_cast<uint32_t>(p));
  std::map<uint32_t, uint64_t> oldest;
  for (const auto& [seq, by_peer] : ops)
    for (const auto& [peer, seen] : by_peer) {
      w.peers.insert(peer);
      if (!oldest.count(peer)) oldest[peer] = seq;
      w.newest[peer] = seq;
      w.last = std::max(w.last, seq);
    }
  for (const auto& [peer, seq] : oldest) w.first = std::max(w.first, seq);
  return w;
}

std::string state_of(const Seen& s) {
  return std::string(to_string(s.row->state)) +
         (s.row->state == FlightState::done ? "" : (s.row->exit_ns ? " after " : " for ") + duration(s.age_ns()));
}

// The first divergence of one group, with the time its op was first entered (to order groups).
std::pair<int64_t, std::string> divergence_in(uint32_t group, const std::map<uint64_t, std::map<uint32_t, Seen>>& ops,
                                              int64_t world) {
  const Window w = window_of(group, ops, world);
  for (auto it = ops.lower_bound(w.first); it != ops.end(); ++it) {
    const auto& [seq, by_peer] = *it;
    const Seen& first = by_peer.begin()->second;
    int64_t entered = first.row->enter_ns;
    for (const auto& [p, s] : by_peer) entered = std::min(entered, s.row->enter_ns);
    const std::string op = "group " + std::to_string(group) + " #" + std::to_string(seq) + " ";
    // A call that differs: name the ranks on each side.
    std::vector<uint32_t> same, other;
    const FlightRow* differing = nullptr;
    for (const auto& [p, s] : by_peer) {
      if (s.row->same_call(*first.row)) same.push_back(p);
      else {
        other.push_back(p);
        if (!differing) differing = s.row;
      }
    }
    if (differing)
      return {entered, op + "differs: " + rank_phrase(same) + " called " + first.row->describe() + ", " + rank_phrase(other) +
                           " called " + differing->describe()};
    std::vector<uint32_t> failed;
    const FlightRow* failure = nullptr;
    for (const auto& [p, s] : by_peer)
      if (s.row->state == FlightState::failed) {
        failed.push_back(p);
        if (!failure) failure = s.row;
      }
    std::vector<uint32_t> called, absent;
    for (uint32_t p : w.peers) (by_peer.count(p) ? called : absent).push_back(p);
    if (!absent.empty()) {
      std::string why = op + first.row->describe() + ": " + rank_phrase(called) + " called it, " + rank_phrase(absent) + " did not";
      std::vector<uint32_t> none;
      for (uint32_t p : absent) {
        if (!w.newest.count(p)) {
          none.push_back(p);
          continue;
        }
        const uint64_t last = w.newest.at(p);
        const Seen& l = ops.at(last).at(p);
        why += "; rank " + std::to_string(p) + "'s last op: #" + std::to_string(last) + " " + l.row->describe() + ", " +
               state_of(l);
      }
      if (!none.empty()) why += "; " + rank_phrase(none) + ": no op in these recorders";
      if (failure) why += " (" + rank_phrase(failed) + " failed: " + failure->error + ")";
      return {entered, why};
    }
    if (failure) return {entered, op + first.row->describe() + " failed on " + rank_phrase(failed) + ": " + failure->error};
  }
  return {0, ""};
}

} // namespace

std::string first_divergence(const std::vector<FlightDump>& dumps) {
  const ByOp by = collectives(dumps);
  const int64_t world = world_of(dumps);
  std::pair<int64_t, std::string> earliest{0, ""};
  for (const auto& [group, ops] : by) {
    auto d = divergence_in(group, ops, world);
    if (!d.second.empty() && (earliest.second.empty() || d.first < earliest.first)) earliest = d;
  }
  return earliest.second;
}

std::string where_ranks_stand(const std::vector<FlightDump>& dumps) {
  const ByOp by = collectives(dumps);
  std::string out;
  for (const auto& [group, ops] : by) {
    const Window w = window_of(group, ops, world_of(dumps));
    // Ranks grouped by their newest op and its state.
    std::map<std::pair<uint64_t, std::string>, std::vector<uint32_t>> at;
    for (const auto& [peer, seq] : w.newest) {
      const Seen& s = ops.at(seq).at(peer);
      at[{seq, s.row->describe() + ", " + std::string(to_string(s.row->state)) +
                   (s.row->state == FlightState::done ? "" : " for " + duration(s.age_ns()))}]
          .push_back(peer);
    }
    for (const auto& [k, peers] : at)
      out += rank_phrase(peers) + ": group " + std::to_string(group) + " #" + std::to_string(k.first) + " " + k.second + "\n";
  }
  return out;
}

std::string flight_report(const std::vector<FlightDump>& dumps, const FlightReportOptions& o) {
  std::string out;
  for (const FlightDump& d : dumps)
    out += "process " + std::to_string(d.pid) + (d.node >= 0 ? " (node " + std::to_string(d.node) + ")" : "") + " on " +
           d.host + ": " + std::to_string(d.rows.size()) + " ops recorded; written because: " + d.reason + "\n";
  const ByOp by = collectives(dumps);
  for (const auto& [group, ops] : by) {
    const Window w = window_of(group, ops, world_of(dumps));
    out += "\ngroup " + std::to_string(group) + " (ranks " + rank_list({w.peers.begin(), w.peers.end()}) + ")\n";
    char cell[64];
    std::snprintf(cell, sizeof cell, "%-8s %-28s", "#", "op");
    out += cell;
    for (uint32_t p : w.peers) {
      std::snprintf(cell, sizeof cell, " %-16s", ("rank " + std::to_string(p)).c_str());
      out += cell;
    }
    end_line(out);
    auto from = ops.begin();
    if (o.last_ops && ops.size() > o.last_ops) std::advance(from, ops.size() - o.last_ops);
    for (auto it = from; it != ops.end(); ++it) {
      const auto& [seq, by_peer] = *it;
      std::snprintf(cell, sizeof cell, "%-8llu %-28s", static_cast<unsigned long long>(seq),
                    by_peer.begin()->second.row->describe().substr(0, 28).c_str());
      out += cell;
      for (uint32_t p : w.peers) {
        auto s = by_peer.find(p);
        auto n = w.newest.find(p);  // none: the rank recorded no op (it never called one)
        std::string c = s == by_peer.end() ? (seq < w.first || n == w.newest.end() || seq > n->second ? "-" : "?")
                                           : std::string(to_string(s->second.row->state)) + " " + duration(s->second.age_ns());
        std::snprintf(cell, sizeof cell, " %-16s", c.c_str());
        out += cell;
      }
      end_line(out);
    }
  }
  const std::string div = first_divergence(dumps);
  out += "\n" + (div.empty() ? "the ranks agree; where they stand:\n" + where_ranks_stand(dumps)
                             : "first divergence: " + div + "\n");
  std::string p2p;
  for (const FlightDump& d : dumps)
    for (const FlightRow& r : d.rows)
      if (!r.collective() && r.state != FlightState::done)
        p2p += "  rank " + std::to_string(r.peer) + ": " + r.describe() + " (group " + std::to_string(r.op.group) + "), " +
               std::string(to_string(r.state)) + " " + duration((r.exit_ns ? r.exit_ns : d.written_ns) - r.enter_ns) +
               (r.error.empty() ? "" : ": " + r.error) + "\n";
  if (!p2p.empty()) out += "sends and receives not done:\n" + p2p;
  return out;
}

} // namespace chorus
