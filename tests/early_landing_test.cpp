// Receives from other nodes landing in the work buffer itself (strategies/early_receives.hpp,
// WorkBuffer::landing_ptr, OpPlan::offer_early): which receives may be offered before their step,
// that a reduction lands only where its first operand lies elsewhere, and that an op whose bytes
// landed early still computes the right result.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "strategies/early_receives.hpp"
#include "strategies/executor.hpp"
#include "strategies/work_buffer.hpp"

namespace chorus {
namespace {

std::vector<Program> ring_all_reduce(int n, std::size_t count) {
  return make_schedule({OpKind::all_reduce, Strategy{Algorithm::ring, 2}, n, 0, count, sizeof(float)});
}

std::byte* bytes_of(std::vector<float>& v) { return reinterpret_cast<std::byte*>(v.data()); }

// Two nodes of one peer: the reduce-scatter's receive may land from the start; so may the
// all-gather's, though the first round's send reads its region (from the input, at posting).
TEST(EarlyReceives, BothReceivesOfATwoNodeRingMayLandFromTheFirstRound) {
  const auto early = early_receives(ring_all_reduce(2, 8));
  ASSERT_EQ(early.size(), 2u);
  for (const auto& peer : early) {
    ASSERT_EQ(peer.size(), 2u);
    EXPECT_EQ(peer[0].step, 1u) << "round 0: send, then the reduce-scatter's receive";
    EXPECT_EQ(peer[0].round, 0u);
    EXPECT_FALSE(peer[0].sends_read);
    EXPECT_EQ(peer[1].step, 3u) << "round 1: send, then the all-gather's receive";
    EXPECT_EQ(peer[1].round, 0u);
    EXPECT_TRUE(peer[1].sends_read) << "round 0 sends the very region the all-gather fills";
  }
}

// A region written in an earlier round is free only from the round after; one a round's sends
// read is offered from that round on; one touched in the receive's own round is not early at all.
TEST(EarlyReceives, TheSearchStopsWhereTheRegionWasWrittenOrRead) {
  std::vector<Program> progs(2);
  progs[0] = {Round{{Step{StepKind::recv_copy, 1, 0, 4}}},                 // writes [0, 4)
              Round{{Step{StepKind::send, 1, 8, 4}}},                      // elsewhere
              Round{{Step{StepKind::send, 1, 0, 4}}},                      // reads [0, 4)
              Round{{Step{StepKind::send, 1, 12, 4}}},                     // elsewhere
              Round{{Step{StepKind::recv_copy, 1, 0, 4}}},                 // early from round 2
              Round{{Step{StepKind::recv_reduce, 1, 4, 4}}},               // nothing before: round 0
              Round{{Step{StepKind::copy, -1, 16, 4, 0}, Step{StepKind::recv_copy, 1, 0, 2}}}};  // clash
  progs[1] = {Round{{Step{StepKind::send, 0, 0, 4}}}, Round{{Step{StepKind::recv_copy, 0, 8, 4}}},
              Round{{Step{StepKind::recv_copy, 0, 0, 4}}}, Round{{Step{StepKind::recv_copy, 0, 12, 4}}},
              Round{{Step{StepKind::send, 0, 0, 4}}}, Round{{Step{StepKind::send, 0, 4, 4}}},
              Round{{Step{StepKind::send, 0, 0, 2}}}};
  const auto early = early_receives(progs);
  std::map<uint32_t, EarlyReceive> by_step;
  for (const auto& e : early[0]) by_step[e.step] = e;
  ASSERT_EQ(by_step.count(0), 1u);
  EXPECT_EQ(by_step[0].round, 0u);
  ASSERT_EQ(by_step.count(4), 1u);
  EXPECT_EQ(by_step[4].round, 2u);
  EXPECT_TRUE(by_step[4].sends_read);
  ASSERT_EQ(by_step.count(5), 1u);
  EXPECT_EQ(by_step[5].round, 0u);
  EXPECT_FALSE(by_step[5].sends_read);
  EXPECT_EQ(by_step.count(7), 0u) << "a copy of its own round reads the region";
  for (std::size_t i = 1; i < early[0].size(); ++i) EXPECT_LE(early[0][i - 1].round, early[0][i].round);
}

// Out of place, an all-reduce's result region still holds its initial content in the input:
// bytes may land on the result and be folded in place. In place, or once written, they may not.
TEST(WorkBufferLanding, AReductionLandsOnlyWhereItsFirstOperandIsElsewhere) {
  std::vector<float> in{1, 2, 3, 4}, out(4, 0);
  WorkBuffer w = WorkBuffer::bind(OpKind::all_reduce, 0, 2, 0, 4, DType::f32, bytes_of(in), bytes_of(out));
  std::byte* at = w.landing_ptr(2, 2);
  ASSERT_EQ(at, bytes_of(out) + 2 * sizeof(float));
  const std::vector<float> theirs{10, 20};
  std::memcpy(at, theirs.data(), 2 * sizeof(float));  // the bytes landed
  w.reduce_from(2, 2, at, ReduceOp::sum);
  EXPECT_EQ(out[2], 13);
  EXPECT_EQ(out[3], 24);
  EXPECT_EQ(w.landing_ptr(2, 2), nullptr) << "written: its first operand is here now";
  EXPECT_EQ(w.landing_ptr(1, 2), nullptr) << "partly written";
  EXPECT_NE(w.landing_ptr(0, 2), nullptr);
  EXPECT_EQ(in, (std::vector<float>{1, 2, 3, 4})) << "the input stays as it was";

  std::vector<float> both{1, 2, 3, 4};
  WorkBuffer same = WorkBuffer::bind(OpKind::all_reduce, 0, 2, 0, 4, DType::f32, bytes_of(both), bytes_of(both));
  EXPECT_EQ(same.landing_ptr(0, 4), nullptr) << "in place: the region is its own first operand";
}

// The other nodes of an op whose rank 0 the test runs: slot `s` carries theirs[s]. A slot whose
// destination was offered gets its bytes written there when they are first waited for (they
// "arrive"); every call is logged in order.
class LandingRemote : public RemoteSteps {
 public:
  explicit LandingRemote(std::map<uint32_t, std::vector<float>> theirs) : theirs_(std::move(theirs)) {}
  bool is_remote(int peer) const override { return peer != 0; }  // the test runs rank 0
  void post_send(uint32_t slot, int, const std::byte* data, std::size_t bytes) override {
    sent_[slot].assign(reinterpret_cast<const float*>(data), reinterpret_cast<const float*>(data + bytes));
    log_.push_back("send " + std::to_string(slot));
  }
  Status wait_sent(uint32_t) override { return Status::ok(); }
  const std::byte* wait_received(uint32_t slot, int, std::size_t bytes, std::size_t, Status&) override {
    log_.push_back("wait " + std::to_string(slot));
    auto& data = theirs_.at(slot);
    EXPECT_EQ(bytes, data.size() * sizeof(float));
    if (auto it = offered_.find(slot); it != offered_.end()) {
      if (!landed_[slot]) std::memcpy(it->second, data.data(), bytes);
      landed_[slot] = true;
      return it->second;
    }
    return bytes_of(data);
  }
  void done_with(uint32_t) override {}
  bool offer_destination(uint32_t slot, int, std::byte* dst, std::size_t bytes) override {
    EXPECT_EQ(bytes, theirs_.at(slot).size() * sizeof(float));
    log_.push_back("offer " + std::to_string(slot));
    offered_[slot] = dst;
    return true;
  }
  void abort(const Status&) override {}
  Status conclude(int, Status local) override { return local; }
  const std::vector<std::string>& log() const { return log_; }
  const std::vector<float>& sent(uint32_t slot) { return sent_[slot]; }

 private:
  std::map<uint32_t, std::vector<float>> theirs_, sent_;
  std::map<uint32_t, std::byte*> offered_;
  std::map<uint32_t, bool> landed_;
  std::vector<std::string> log_;
};

// Rank 0 of a two-node ring all-reduce of 4 elements: part 0 = [0, 2) is reduced here, part 1
// = [2, 4) there. Rank 1's input is {10, 20, 30, 40}.
struct TwoNodeRing {
  std::shared_ptr<const CompiledSchedule> schedule = CompiledSchedule::compile(ring_all_reduce(2, 4));
  uint32_t rs_slot = schedule->slot_of_step[0][1], ag_slot = schedule->slot_of_step[0][3];
  std::shared_ptr<LandingRemote> remote;
  OpPlan plan;
  explicit TwoNodeRing(const std::vector<float>& mine)
      : remote(std::make_shared<LandingRemote>(std::map<uint32_t, std::vector<float>>{
            {rs_slot, {10, 20}}, {ag_slot, {mine[2] + 30, mine[3] + 40}}})),
        plan(OpDesc::of(OpKind::all_reduce, DType::f32, ReduceOp::sum, 0, 4), 2, schedule, Clock::now() + std::chrono::seconds(10),
             "all_reduce #0", remote) {}
  std::size_t at(const std::string& entry) const {
    const auto& log = remote->log();
    return static_cast<std::size_t>(std::find(log.begin(), log.end(), entry) - log.begin());
  }
};

TEST(EarlyLanding, BothReceivesOfAnOutOfPlaceRingLandInTheResultBeforeAnythingIsAwaited) {
  std::vector<float> in{1, 2, 3, 4}, out(4, 0);
  TwoNodeRing op(in);
  WorkBuffer work = WorkBuffer::bind(OpKind::all_reduce, 0, 2, 0, 4, DType::f32, bytes_of(in), bytes_of(out));
  ASSERT_TRUE(op.plan.run(0, work).is_ok());
  EXPECT_EQ(out, (std::vector<float>{11, 22, 33, 44}));
  EXPECT_EQ(in, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(op.remote->sent(op.rs_slot).size(), 0u) << "rank 0 receives on this slot";
  const std::string rs = std::to_string(op.rs_slot), ag = std::to_string(op.ag_slot);
  const std::size_t first_wait = op.at("wait " + rs);
  EXPECT_LT(op.at("offer " + rs), first_wait);
  EXPECT_LT(op.at("offer " + ag), first_wait) << "the all-gather's bytes may come during the reduce-scatter";
  EXPECT_GT(op.at("offer " + ag), 0u) << "offered only once the first round's send was posted";
}

// In place the all-gather's region is what the first round's send reads (its memory, maybe still
// in flight): its offer waits for the next round, and the reduce-scatter cannot land in place.
TEST(EarlyLanding, InPlaceTheAllGatherIsOfferedOnceTheFirstRoundIsDone) {
  std::vector<float> x{1, 2, 3, 4};
  TwoNodeRing op(x);
  WorkBuffer work = WorkBuffer::bind(OpKind::all_reduce, 0, 2, 0, 4, DType::f32, bytes_of(x), bytes_of(x));
  ASSERT_TRUE(op.plan.run(0, work).is_ok());
  EXPECT_EQ(x, (std::vector<float>{11, 22, 33, 44}));
  const std::string rs = std::to_string(op.rs_slot), ag = std::to_string(op.ag_slot);
  const auto& log = op.remote->log();
  EXPECT_EQ(op.at("offer " + rs), log.size()) << "nowhere to land: the region is its own first operand";
  EXPECT_GT(op.at("offer " + ag), op.at("wait " + rs)) << "not before the reduce-scatter is done";
  EXPECT_LT(op.at("offer " + ag), op.at("wait " + ag));
}

// Rank 0 of a four-node ring, the other ranks' inputs all zero: what arrives in the reduce-scatter
// is zeros, in the all-gather rank 0's own parts, and the result is rank 0's input. Each
// all-gather region was sent (and, but for the first, reduced) during the reduce-scatter: every
// one is offered once the round that last read it is over, all before the all-gather's first wait,
// and two of them before the all-gather even began.
TEST(EarlyLanding, AFourNodeRingOffersEveryAllGatherRegionOnceTheRoundThatReadItIsOver) {
  const std::size_t count = 8;
  auto schedule = CompiledSchedule::compile(ring_all_reduce(4, count));
  std::vector<float> in{1, 2, 3, 4, 5, 6, 7, 8}, out(count, 0);
  std::map<uint32_t, std::vector<float>> theirs;
  std::vector<uint32_t> copies;  // the all-gather's slots
  std::size_t flat = 0, sends = 0, first_ag_send = 0;
  for (const Round& round : schedule->programs[0])
    for (const Step& st : round.steps) {
      const uint32_t slot = schedule->slot_of_step[0][flat++];
      if (st.kind == StepKind::send && ++sends == 4) first_ag_send = slot;
      if (st.kind == StepKind::recv_reduce) theirs[slot] = std::vector<float>(st.count, 0);
      if (st.kind == StepKind::recv_copy) {
        theirs[slot] = std::vector<float>(in.begin() + static_cast<std::ptrdiff_t>(st.offset),
                                          in.begin() + static_cast<std::ptrdiff_t>(st.offset + st.count));
        copies.push_back(slot);
      }
    }
  ASSERT_EQ(theirs.size(), 6u);
  ASSERT_EQ(copies.size(), 3u);
  auto remote = std::make_shared<LandingRemote>(theirs);
  OpPlan plan(OpDesc::of(OpKind::all_reduce, DType::f32, ReduceOp::sum, 0, count), 4, schedule,
              Clock::now() + std::chrono::seconds(10), "all_reduce #0", remote);
  WorkBuffer work = WorkBuffer::bind(OpKind::all_reduce, 0, 4, 0, count, DType::f32, bytes_of(in), bytes_of(out));
  ASSERT_TRUE(plan.run(0, work).is_ok());
  EXPECT_EQ(out, in);
  const auto& log = remote->log();
  auto at = [&](const std::string& entry) {
    return static_cast<std::size_t>(std::find(log.begin(), log.end(), entry) - log.begin());
  };
  for (const auto& [slot, data] : theirs) EXPECT_LT(at("offer " + std::to_string(slot)), log.size()) << "slot " << slot;
  const std::size_t first_ag_wait = at("wait " + std::to_string(copies[0]));
  int before_ag = 0;
  for (uint32_t slot : copies) {
    EXPECT_LT(at("offer " + std::to_string(slot)), first_ag_wait) << "slot " << slot;
    before_ag += at("offer " + std::to_string(slot)) < at("send " + std::to_string(first_ag_send));
  }
  EXPECT_EQ(before_ag, 2);
}

} // namespace
} // namespace chorus
