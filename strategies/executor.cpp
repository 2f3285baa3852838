#include "strategies/executor.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <tuple>

#include "strategies/reduce_kernels.hpp"
#include "strategies/simulate.hpp"

namespace chorus {

std::shared_ptr<const CompiledSchedule> CompiledSchedule::compile(std::vector<Program> programs) {
  auto cs = std::make_shared<CompiledSchedule>();
  const int n = static_cast<int>(programs.size());
  // k-th send from a to b pairs with the k-th receive at b from a.
  std::map<std::tuple<int, int, int>, uint32_t> ids;
  std::map<std::pair<int, int>, int> sends, recvs;
  std::vector<std::size_t> send_count, recv_count;
  auto slot = [&](int from, int to, int k, std::size_t cnt, bool is_send) {
    auto [it, fresh] = ids.try_emplace({from, to, k}, static_cast<uint32_t>(ids.size()));
    if (fresh) { send_count.push_back(SIZE_MAX); recv_count.push_back(SIZE_MAX); }
    (is_send ? send_count : recv_count)[it->second] = cnt;
    return it->second;
  };
  cs->slot_of_step.resize(n);
  for (int p = 0; p < n; ++p)
    for (auto& round : programs[p])
      for (auto& s : round.steps) {
        uint32_t id = UINT32_MAX;
        const bool local = s.kind == StepKind::copy || s.kind == StepKind::reduce;
        if (!local && (s.peer < 0 || s.peer >= n || s.peer == p))
          throw std::logic_error("step of peer " + std::to_string(p) + " names peer " + std::to_string(s.peer));
        if (s.kind == StepKind::send) id = slot(p, s.peer, sends[{p, s.peer}]++, s.count, true);
        else if (!local) id = slot(s.peer, p, recvs[{s.peer, p}]++, s.count, false);
        cs->slot_of_step[p].push_back(id);
      }
  for (std::size_t i = 0; i < send_count.size(); ++i)
    if (send_count[i] != recv_count[i])
      throw std::logic_error("schedule has an unpaired or size-mismatched send/receive");
  cs->num_slots = ids.size();
  cs->early_receives = chorus::early_receives(programs);
  if (programs.size() <= CompiledSchedule::kReachPeers) cs->reach = causal_reach(programs);
  cs->programs = std::move(programs);
  return cs;
}

OpPlan::OpPlan(const OpDesc& op, int n, std::shared_ptr<const CompiledSchedule> schedule, Clock::time_point deadline,
               std::string label, std::shared_ptr<RemoteSteps> remote, unsigned local_threads)
    : op_(op), n_(n),
      schedule_(std::move(schedule)), slots_(new Slot[schedule_->num_slots ? schedule_->num_slots : 1]),
      deadline_(deadline),
      spin_(patience_for(local_threads ? local_threads : static_cast<unsigned>(n))),
      label_(std::move(label)), remote_(std::move(remote)) {}

void OpPlan::abort(Status why) {
  {
    std::lock_guard<std::mutex> lk(abort_mu_);
    if (aborted_.load()) return;
    abort_status_ = std::move(why);
    aborted_.store(true);
  }
  for (std::size_t i = 0; i < schedule_->num_slots; ++i) slots_[i].word.set(3);
  if (remote_) remote_->abort(aborted_status());
}

Status OpPlan::aborted_status() {
  std::lock_guard<std::mutex> lk(abort_mu_);
  return abort_status_;
}

Status OpPlan::run(int p, WorkBuffer& work, StepTrace* trace) {
  Status s = trace ? run_program<true>(p, work, trace) : run_program<false>(p, work, nullptr);
  if (!remote_) return s;
  const uint64_t begin = trace ? trace->now() : 0;
  s = remote_->conclude(p, std::move(s));
  if (trace) trace->concluded(begin);
  return s;
}

void OpPlan::offer_early(int p, std::size_t r, std::size_t first, WorkBuffer& work, Landing& land) {
  const auto& early = schedule_->early_receives[static_cast<std::size_t>(p)];
  const auto& program = schedule_->programs[static_cast<std::size_t>(p)];
  const std::size_t esize = dtype_size(op_.dtype);
  auto offer = [&](const EarlyReceive& e) {
    std::size_t at = e.step - first;  // the step, found from round r's first by its flat index
    std::size_t round = r;
    while (at >= program[round].steps.size()) at -= program[round++].steps.size();
    const Step& s = program[round].steps[at];
    if (!remote_->is_remote(s.peer)) return;
    // A reduction lands only where its first operand is still elsewhere. A copy's region is the
    // step's to overwrite, but this round's sends may still be reading it: then only if they read
    // it from elsewhere, else from the next round on (every send of a round is done by its end).
    std::byte* dst = nullptr;
    if (s.kind == StepKind::recv_reduce) {
      dst = work.landing_ptr(s.offset, s.count);
    } else if (!e.sends_read || work.landing_ptr(s.offset, s.count)) {
      dst = work.write_ptr(s.offset, s.count);
    } else {
      land.later.push_back({e.step, static_cast<uint32_t>(r + 1), false});
      return;
    }
    if (!dst || !remote_->offer_destination(schedule_->slot_of_step[p][e.step], p, dst, s.count * esize)) return;
    if (land.at.empty()) land.at.assign(schedule_->slot_of_step[p].size(), nullptr);
    land.at[e.step] = dst;
  };
  for (std::size_t i = 0; i < land.later.size();) {
    if (land.later[i].round != r) {
      ++i;
      continue;
    }
    const EarlyReceive e = land.later[i];
    land.later.erase(land.later.begin() + static_cast<std::ptrdiff_t>(i));
    offer(e);
  }
  for (; land.next < early.size() && early[land.next].round == r; ++land.next) offer(early[land.next]);
}

Status OpPlan::receive_remote(int p, const Step& s, uint32_t slot, WorkBuffer& work, std::byte* landing) {
  const std::size_t esize = dtype_size(op_.dtype);
  const std::size_t bytes = s.count * esize;
  // Pieces small enough that reducing the first overlaps receiving the next.
  const std::size_t piece = std::max<std::size_t>(1, (std::size_t{1} << 20) / esize);
  Status error;
  // A copy lands straight in the work buffer when it has not started arriving yet.
  if (!landing && s.kind == StepKind::recv_copy) {
    landing = work.write_ptr(s.offset, s.count);
    if (landing && !remote_->offer_destination(slot, p, landing, bytes)) landing = nullptr;
  }
  // A copy landed in place has nothing to do per piece; a reduction landed in place folds each
  // piece into itself.
  const bool copied = landing && s.kind == StepKind::recv_copy;
  const std::size_t step = copied ? s.count : piece;
  for (std::size_t off = 0; off < s.count || off == 0; off += step) {
    const std::size_t cnt = std::min(step, s.count - off);
    const std::byte* base = remote_->wait_received(slot, s.peer, bytes, (off + cnt) * esize, error);
    if (!base) {
      abort(error);
      return aborted_status();
    }
    if (aborted_.load()) return aborted_status();
    if (cnt == 0 || copied) continue;
    if (s.kind == StepKind::recv_copy) work.copy_from(s.offset + off, cnt, base + off * esize);
    else work.reduce_from(s.offset + off, cnt, base + off * esize, op_.redop);
  }
  remote_->done_with(slot);
  return Status::ok();
}

namespace {
// Times the steps of a traced program for its StepTrace. The untraced instance does nothing (and
// its spans are never built), so a program without a trace runs as if this were not there.
template <bool kOn>
struct StepClock {
  StepTrace* trace;
  uint64_t start() const {
    if constexpr (kOn) return trace->now();
    return 0;
  }
  void stop(const StepSpan& s) const {
    if constexpr (kOn) trace->step(s);
  }
};
} // namespace

template <bool kTraced>
Status OpPlan::run_program(int p, WorkBuffer& work, StepTrace* trace) {
  const StepClock<kTraced> clock{trace};
  const std::size_t esize = dtype_size(op_.dtype);
  const auto& program = schedule_->programs[p];
  const auto& slot_ids = schedule_->slot_of_step[p];
  auto timeout = [&](const Step& s) {
    abort(Status(Errc::timeout, label_ + ": peer " + std::to_string(p) + " waited for peer " +
                                    std::to_string(s.peer) + " past the op's deadline"));
    return aborted_status();
  };
  // A step that began at `t` has ended: its span (nothing at all without a trace).
  auto ended = [&](const Step& s, uint64_t t, bool remote, bool post = false, std::size_t fused = 1) {
    clock.stop(StepSpan{s.kind, remote, post, s.peer, static_cast<uint32_t>(fused), s.count * esize, t});
  };
  std::vector<const std::byte*> sources(static_cast<std::size_t>(n_) + 1);
  Landing landing;
  try {
    std::size_t first = 0;  // slot_ids index of the round's first step
    for (std::size_t r = 0; r < program.size(); ++r) {
      const Round& round = program[r];
      for (std::size_t i = 0; i < round.steps.size(); ++i) {  // 1. post sends
        const Step& s = round.steps[i];
        if (s.kind != StepKind::send) continue;
        if (remote_ && remote_->is_remote(s.peer)) {
          const uint64_t t = clock.start();
          remote_->post_send(slot_ids[first + i], s.peer, work.read_ptr(s.offset, s.count), s.count * esize);
          ended(s, t, true, true);
          continue;
        }
        Slot& sl = slots_[slot_ids[first + i]];
        sl.data = work.read_ptr(s.offset, s.count);
        sl.word.set(1);
      }
      if (remote_) offer_early(p, r, first, work, landing);
      // 2. receives and local copies, in order. Consecutive receive-and-reduce steps into one
      // region are fused into a single pass over all their sources.
      for (std::size_t i = 0; i < round.steps.size();) {
        const Step& s = round.steps[i];
        if (s.kind == StepKind::send) {
          ++i;
          continue;
        }
        const uint64_t t = clock.start();
        if (s.kind == StepKind::copy) {
          work.local_copy(s.offset, s.src_offset, s.count);
          ended(s, t, false);
          ++i;
          continue;
        }
        if (s.kind == StepKind::reduce) {
          work.reduce_from(s.offset, s.count, work.read_ptr(s.src_offset, s.count), op_.redop);
          ended(s, t, false);
          ++i;
          continue;
        }
        if (remote_ && remote_->is_remote(s.peer)) {
          std::byte* at = landing.at.empty() ? nullptr : landing.at[first + i];
          if (auto st = receive_remote(p, s, slot_ids[first + i], work, at); !st) return st;
          ended(s, t, true);
          ++i;
          continue;
        }
        std::size_t j = i + 1;
        if (s.kind == StepKind::recv_reduce)
          while (j < round.steps.size() && j - i < sources.size() && round.steps[j].kind == StepKind::recv_reduce &&
                 !(remote_ && remote_->is_remote(round.steps[j].peer)) &&
                 round.steps[j].offset == s.offset && round.steps[j].count == s.count)
            ++j;
        for (std::size_t k = i; k < j; ++k) {
          Slot& sl = slots_[slot_ids[first + k]];
          if (!sl.word.wait_at_least(1, deadline_, spin_)) return timeout(round.steps[k]);
          if (aborted_.load()) return aborted_status();
          sources[k - i] = sl.data;
        }
        if (s.kind == StepKind::recv_copy) work.copy_from(s.offset, s.count, sources[0]);
        else work.reduce_many(s.offset, s.count, sources.data(), j - i, op_.redop);
        for (std::size_t k = i; k < j; ++k) slots_[slot_ids[first + k]].word.set(2);
        ended(s, t, false, false, j - i);
        i = j;
      }
      for (std::size_t i = 0; i < round.steps.size(); ++i) {  // 3. our sends were read: our memory is ours again
        const Step& s = round.steps[i];
        if (s.kind == StepKind::send) {
          const uint64_t t = clock.start();
          if (remote_ && remote_->is_remote(s.peer)) {
            if (auto st = remote_->wait_sent(slot_ids[first + i]); !st) {
              abort(st);
              return aborted_status();
            }
            ended(s, t, true);
            continue;
          }
          Slot& sl = slots_[slot_ids[first + i]];
          if (!sl.word.wait_at_least(2, deadline_, spin_)) return timeout(s);
          if (aborted_.load()) return aborted_status();
          ended(s, t, false);
        }
      }
      first += round.steps.size();
    }
    work.finish();
  } catch (const std::exception& e) {
    abort(Status(Errc::internal, label_ + ": " + e.what()));
    return aborted_status();
  }
  return Status::ok();
}

} // namespace chorus
