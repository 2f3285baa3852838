// The schedule simulator: a static check of every round, then an event loop that advances each
// peer as far as the round semantics allow until all finish or none can move.
#include "strategies/simulate.hpp"

#include <algorithm>
#include <unordered_map>
#include <utility>

namespace chorus {
namespace {

std::string where(std::size_t p, std::size_t r, std::size_t s) {
  return "peer " + std::to_string(p) + " round " + std::to_string(r) + " step " +
         std::to_string(s) + ": ";
}

const char* kind_name(StepKind k) {
  switch (k) {
    case StepKind::send: return "send";
    case StepKind::recv_reduce: return "recv_reduce";
    case StepKind::recv_copy: return "recv_copy";
    case StepKind::copy: return "copy";
    case StepKind::reduce: return "reduce";
  }
  return "?";
}

bool fits(std::size_t offset, std::size_t count, std::size_t size) {
  return offset <= size && count <= size - offset;
}

bool overlap(std::size_t a, std::size_t an, std::size_t b, std::size_t bn) {
  return an > 0 && bn > 0 && a < b + bn && b < a + an;
}

// Checks everything that does not depend on execution; returns the first problem or "".
std::string check_static(const std::vector<Program>& programs,
                         const std::vector<std::vector<int64_t>>& work) {
  const std::size_t n = programs.size();
  // Regions a round's sends read, sorted by start, with the running maximum of their ends, so a
  // write [a, b) overlaps one iff some send starting before b ends after a.
  std::vector<std::pair<std::size_t, std::size_t>> reads;
  for (std::size_t p = 0; p < n; ++p) {
    const std::size_t size = work[p].size();
    for (std::size_t r = 0; r < programs[p].size(); ++r) {
      const auto& steps = programs[p][r].steps;
      reads.clear();
      for (std::size_t s = 0; s < steps.size(); ++s) {
        const Step& st = steps[s];
        if (st.kind == StepKind::copy || st.kind == StepKind::reduce) {
          const std::string k = kind_name(st.kind);
          if (st.peer != -1) return where(p, r, s) + k + " must have peer -1";
          if (!fits(st.src_offset, st.count, size))
            return where(p, r, s) + k + " source out of range";
          if (overlap(st.src_offset, st.count, st.offset, st.count))
            return where(p, r, s) + k + " source and destination overlap";
        } else if (st.peer < 0 || static_cast<std::size_t>(st.peer) >= n) {
          return where(p, r, s) + kind_name(st.kind) + " names peer " + std::to_string(st.peer) +
                 " out of range";
        } else if (static_cast<std::size_t>(st.peer) == p) {
          return where(p, r, s) + kind_name(st.kind) + " to/from itself";
        }
        if (!fits(st.offset, st.count, size))
          return where(p, r, s) + kind_name(st.kind) + " region [" + std::to_string(st.offset) +
                 ", +" + std::to_string(st.count) + ") out of range (work size " +
                 std::to_string(size) + ")";
        if (st.kind == StepKind::send && st.count > 0)
          reads.push_back({st.offset, st.offset + st.count});
      }
      std::sort(reads.begin(), reads.end());
      for (std::size_t i = 1; i < reads.size(); ++i)
        reads[i].second = std::max(reads[i].second, reads[i - 1].second);
      for (std::size_t s = 0; s < steps.size(); ++s) {
        const Step& st = steps[s];
        if (st.kind == StepKind::send || st.count == 0) continue;
        const std::size_t a = st.offset, b = st.offset + st.count;
        auto it = std::lower_bound(reads.begin(), reads.end(), std::make_pair(b, std::size_t{0}));
        if (it != reads.begin() && std::prev(it)->second > a)
          return where(p, r, s) + kind_name(st.kind) + " writes [" + std::to_string(a) + ", " +
                 std::to_string(b) + ") which a send of the same round reads";
      }
    }
  }
  return "";
}

// A posted send. Its data and the sender's heard-from bitset at posting time live in the
// simulator's pools (data_[data, +count), know_[know, +words)), saving two allocations each.
struct Message {
  std::size_t dst, round, data, count, know, post_time;
  std::size_t src = 0;
  std::size_t recv_time = 0;
  bool received = false;
};

// FIFO of message ids for one ordered pair.
struct Channel {
  std::vector<std::size_t> ids;
  std::size_t head = 0;
};

enum class Phase { post, receive, wait, done };

struct PeerState {
  std::size_t round = 0;
  Phase phase = Phase::post;
  std::size_t step = 0;               // next step to examine in the receive phase
  std::vector<std::size_t> pending;   // this round's messages
  std::size_t clock = 0;
};

class Simulator {
 public:
  Simulator(const std::vector<Program>& programs, SimResult& result, const SimOptions& options,
            bool structure_only = false)
      : programs_(programs), res_(result), options_(options), structure_only_(structure_only), n_(programs.size()),
        words_((n_ + 63) / 64), peers_(n_), knowledge_(n_, std::vector<uint64_t>(words_, 0)) {
    for (std::size_t p = 0; p < n_; ++p) {
      knowledge_[p][p / 64] |= uint64_t{1} << (p % 64);
      if (programs_[p].empty()) peers_[p].phase = Phase::done;
    }
  }

  void run() {
    for (bool moved = true; moved && res_.error.empty();) {
      moved = false;
      for (std::size_t p = 0; p < n_ && res_.error.empty(); ++p)
        while (res_.error.empty() && advance(p)) moved = true;
    }
    report();
    if (res_.error.empty()) diagnose_stuck();
  }

 private:
  Channel& channel(std::size_t src, std::size_t dst) { return channels_[src * n_ + dst]; }

  const Step& step_at(std::size_t p) const {
    return programs_[p][peers_[p].round].steps[peers_[p].step];
  }

  // One unit of progress for peer p; false when it is finished or blocked.
  bool advance(std::size_t p) {
    PeerState& ps = peers_[p];
    const auto& steps = ps.phase == Phase::done ? empty_ : programs_[p][ps.round].steps;
    switch (ps.phase) {
      case Phase::done: return false;
      case Phase::post:
        for (const Step& st : steps) {
          if (st.kind != StepKind::send) continue;
          Message m{static_cast<std::size_t>(st.peer), ps.round, data_.size(), st.count,
                    know_.size(), ps.clock, p};
          if (!structure_only_) {
            const auto from = res_.work[p].begin() + static_cast<std::ptrdiff_t>(st.offset);
            data_.insert(data_.end(), from, from + static_cast<std::ptrdiff_t>(st.count));
          }
          know_.insert(know_.end(), knowledge_[p].begin(), knowledge_[p].end());
          channel(p, m.dst).ids.push_back(messages_.size());
          ps.pending.push_back(messages_.size());
          messages_.push_back(m);
          ++res_.messages;
          res_.elements_sent += st.count;
        }
        ps.phase = Phase::receive;
        ps.step = 0;
        return true;
      case Phase::receive: {
        while (ps.step < steps.size() && steps[ps.step].kind == StepKind::send) ++ps.step;
        if (ps.step == steps.size()) {
          ps.phase = Phase::wait;
          return true;
        }
        const Step& st = steps[ps.step];
        auto& w = res_.work[p];
        if (structure_only_ && (st.kind == StepKind::copy || st.kind == StepKind::reduce)) {
          ++ps.step;
          return true;
        }
        if (st.kind == StepKind::copy) {
          std::copy_n(w.begin() + static_cast<std::ptrdiff_t>(st.src_offset), st.count,
                      w.begin() + static_cast<std::ptrdiff_t>(st.offset));
          ++ps.step;
          return true;
        }
        if (st.kind == StepKind::reduce) {
          for (std::size_t i = 0; i < st.count; ++i) w[st.offset + i] = combine(st.kind, w[st.offset + i], w[st.src_offset + i]);
          ++ps.step;
          return true;
        }
        Channel& ch = channel(static_cast<std::size_t>(st.peer), p);
        if (ch.head == ch.ids.size()) return false;
        Message& m = messages_[ch.ids[ch.head]];
        if (m.count != st.count) {
          res_.error = where(p, ps.round, ps.step) + kind_name(st.kind) + " of " +
                       std::to_string(st.count) + " elements from peer " +
                       std::to_string(st.peer) + " matches its send of " +
                       std::to_string(m.count) + " elements (its round " +
                       std::to_string(m.round) + "): count mismatch";
          return false;
        }
        ++ch.head;
        const int64_t* in = data_.data() + m.data;
        for (std::size_t i = 0; i < (structure_only_ ? 0 : st.count); ++i) {
          auto& d = w[st.offset + i];
          d = combine(st.kind, d, in[i]);
        }
        for (std::size_t i = 0; i < words_; ++i) knowledge_[p][i] |= know_[m.know + i];
        ps.clock = std::max(ps.clock, m.post_time + 1);
        m.recv_time = ps.clock;
        m.received = true;
        ++ps.step;
        return true;
      }
      case Phase::wait:
        if (options_.buffered_sends) {
          ps.pending.clear();
          ps.phase = ++ps.round == programs_[p].size() ? Phase::done : Phase::post;
          return true;
        }
        for (std::size_t id : ps.pending)
          if (!messages_[id].received && !across_nodes(messages_[id])) return false;
        for (std::size_t id : ps.pending) ps.clock = std::max(ps.clock, messages_[id].recv_time);
        ps.pending.clear();
        ps.phase = ++ps.round == programs_[p].size() ? Phase::done : Phase::post;
        return true;
    }
    return false;
  }

  // What a receive or local reduce leaves in dst, given the incoming value x.
  int64_t combine(StepKind kind, int64_t dst, int64_t x) const {
    const auto xu = static_cast<uint64_t>(x), y = static_cast<uint64_t>(dst);
    if (kind == StepKind::recv_copy) return x;
    if (options_.ordered_combine) return static_cast<int64_t>(y * 1000003u + xu + 1u);
    return static_cast<int64_t>(y + xu);
  }

  // A message between peers of different nodes (SimOptions::node_of): buffered, like a network send.
  bool across_nodes(const Message& m) const {
    const auto& nodes = options_.node_of;
    return !nodes.empty() && nodes[m.src] != nodes[m.dst];
  }

  void report() {
    res_.heard_from.assign(n_, std::vector<bool>(n_, false));
    for (std::size_t p = 0; p < n_; ++p) {
      for (std::size_t q = 0; q < n_; ++q)
        res_.heard_from[p][q] = (knowledge_[p][q / 64] >> (q % 64)) & 1u;
      res_.makespan = std::max(res_.makespan, peers_[p].clock);
    }
  }

  // Nobody can move: if someone has not finished, say why (the first such peer in index order).
  void diagnose_stuck() {
    std::string unmatched, blocked;
    for (std::size_t p = 0; p < n_; ++p) {
      const PeerState& ps = peers_[p];
      if (ps.phase == Phase::done) continue;
      std::size_t other = 0;
      std::string what;
      if (ps.phase == Phase::receive) {
        other = static_cast<std::size_t>(step_at(p).peer);
        what = where(p, ps.round, ps.step) + "waits to receive from peer " + std::to_string(other);
      } else {
        for (std::size_t id : ps.pending)
          if (!messages_[id].received) {
            other = messages_[id].dst;
            break;
          }
        what = "peer " + std::to_string(p) + " round " + std::to_string(ps.round) +
               ": waits for peer " + std::to_string(other) + " to receive its send";
      }
      if (peers_[other].phase == Phase::done) {
        if (unmatched.empty())
          unmatched = (ps.phase == Phase::receive ? "unmatched receive: " : "unmatched send: ") +
                      what + ", which has finished";
      } else if (blocked.empty()) {
        blocked = "deadlock: " + what;
      }
    }
    res_.error = !unmatched.empty() ? unmatched : blocked;
  }

  const std::vector<Program>& programs_;
  SimResult& res_;
  const SimOptions& options_;
  const bool structure_only_;  // causal_reach: messages and knowledge, no data
  std::size_t n_, words_;
  std::vector<PeerState> peers_;
  std::vector<std::vector<uint64_t>> knowledge_;  // per peer: bitset of peers heard from
  std::vector<Message> messages_;
  std::vector<int64_t> data_;    // message contents, as posted
  std::vector<uint64_t> know_;   // senders' heard-from bitsets, as posted
  std::unordered_map<std::size_t, Channel> channels_;  // by src * n + dst
  const std::vector<Step> empty_;
};

} // namespace

SimResult simulate(const std::vector<Program>& programs,
                   const std::vector<std::vector<int64_t>>& initial_work,
                   const SimOptions& options) {
  SimResult res;
  res.work = initial_work;
  if (initial_work.size() != programs.size()) {
    res.error = "simulate: " + std::to_string(programs.size()) + " programs but " +
                std::to_string(initial_work.size()) + " work buffers";
    return res;
  }
  res.error = check_static(programs, initial_work);
  if (!res.error.empty()) return res;
  Simulator(programs, res, options).run();
  return res;
}

std::vector<std::vector<bool>> causal_reach(const std::vector<Program>& programs) {
  SimResult res;
  res.work.assign(programs.size(), {});
  SimOptions network;
  network.buffered_sends = true;
  Simulator(programs, res, network, true).run();
  if (!res.ok()) return {};
  return res.heard_from;
}

} // namespace chorus
