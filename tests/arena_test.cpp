// The arena's protocol (strategies/arena.hpp) on its own: peers that meet with the same fitting
// call go, anything else goes slow, every peer of an op gets the same verdict whoever is late or
// gives up, a closed arena ends waits at once, and a reader that fell behind learns that its
// inputs were overwritten. The ops' data phase (strategies/arena_ops.hpp) against plain loops.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "strategies/arena.hpp"
#include "strategies/arena_ops.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;
using Verdict = Arena::Verdict;

struct Region {
  explicit Region(uint32_t peers, std::size_t slot = 4096, uint64_t tag = 7)
      : bytes(Arena::region_bytes(peers, slot)), mem(std::aligned_alloc(64, bytes), &std::free) {
    arena = Arena::create(mem.get(), peers, slot, tag);
    arena.open();
  }
  std::size_t bytes;
  std::unique_ptr<void, decltype(&std::free)> mem;
  Arena arena;
};

ArenaCall all_reduce_call(std::size_t count) {
  ArenaCall c;
  c.kind = OpKind::all_reduce;
  c.dtype = DType::f32;
  c.count = count;
  c.ndim = 1;
  c.dims[0] = static_cast<int64_t>(count);
  c.fits = true;
  return c;
}

constexpr Patience kSpin{std::chrono::microseconds(50), std::chrono::nanoseconds(0)};

// Every peer meets op `seq` on a thread of its own; the verdicts by rank.
std::vector<Verdict> meet_all(Arena& a, uint64_t seq, const std::vector<ArenaCall>& calls,
                              std::chrono::milliseconds wait = 2000ms) {
  std::vector<Verdict> v(calls.size(), Verdict::slow);
  std::vector<std::thread> ts;
  std::vector<float> input(calls[0].count, 1.0f);
  for (uint32_t r = 0; r < calls.size(); ++r)
    ts.emplace_back([&, r] {
      v[r] = a.meet(r, seq, calls[r], input.data(), input.size() * sizeof(float), Clock::now() + wait, kSpin);
    });
  for (auto& t : ts) t.join();
  return v;
}

TEST(Arena, PeersWithTheSameFittingCallGo) {
  Region r(3);
  const auto c = all_reduce_call(16);
  EXPECT_EQ(meet_all(r.arena, 0, {c, c, c}), std::vector<Verdict>(3, Verdict::go));
  EXPECT_EQ(meet_all(r.arena, 1, {c, c, c}), std::vector<Verdict>(3, Verdict::go));
}

TEST(Arena, ACallThatDiffersOrDoesNotFitSendsEveryPeerTheOrdinaryWay) {
  Region r(3);
  const auto c = all_reduce_call(16);
  auto other_count = c;
  other_count.count = 17;
  other_count.dims[0] = 17;
  EXPECT_EQ(meet_all(r.arena, 0, {c, other_count, c}), std::vector<Verdict>(3, Verdict::slow));
  auto other_shape = c;
  other_shape.ndim = 2;
  other_shape.dims[0] = 4;
  other_shape.dims[1] = 4;  // the same count, another shape: the ordinary path says shape_mismatch
  EXPECT_EQ(meet_all(r.arena, 1, {c, c, other_shape}), std::vector<Verdict>(3, Verdict::slow));
  auto unfit = c;
  unfit.fits = false;
  EXPECT_EQ(meet_all(r.arena, 2, {unfit, c, c}), std::vector<Verdict>(3, Verdict::slow));
  auto other_op = c;
  other_op.redop = ReduceOp::max;
  EXPECT_EQ(meet_all(r.arena, 3, {c, c, other_op}), std::vector<Verdict>(3, Verdict::slow));
  // And the arena still works for the next op.
  EXPECT_EQ(meet_all(r.arena, 4, {c, c, c}), std::vector<Verdict>(3, Verdict::go));
}

TEST(Arena, APeerLatePastTheOthersPatienceGetsTheirVerdict) {
  Region r(2);
  const auto c = all_reduce_call(4);
  float x[4] = {1, 2, 3, 4};
  EXPECT_EQ(r.arena.not_posted(0), (std::vector<uint32_t>{0, 1}));
  const auto start = Clock::now();
  EXPECT_EQ(r.arena.meet(0, 0, c, x, sizeof x, Clock::now() + 30ms, kSpin), Verdict::slow);
  EXPECT_GE(Clock::now() - start, 30ms);
  EXPECT_EQ(r.arena.not_posted(0), std::vector<uint32_t>{1});  // what a status report names
  // Peer 1 comes later: every peer is there now, but the op went the ordinary way already.
  EXPECT_EQ(r.arena.meet(1, 0, c, x, sizeof x, Clock::now() + 30ms, kSpin), Verdict::slow);
  EXPECT_TRUE(r.arena.not_posted(0).empty());
  // The next op meets normally; op 0's posts are overwritten by op 2's, which came and went on.
  EXPECT_EQ(meet_all(r.arena, 1, {c, c}), std::vector<Verdict>(2, Verdict::go));
  EXPECT_EQ(meet_all(r.arena, 2, {c, c}), std::vector<Verdict>(2, Verdict::go));
  EXPECT_TRUE(r.arena.not_posted(0).empty());
  EXPECT_EQ(r.arena.not_posted(3), (std::vector<uint32_t>{0, 1}));
}

TEST(Arena, ClosingEndsAWaitAtOnceAndEveryLaterMeetGoesSlow) {
  Region r(2);
  const auto c = all_reduce_call(4);
  float x[4] = {};
  std::atomic<bool> done{false};
  Verdict v = Verdict::go;
  std::thread waiter([&] {
    v = r.arena.meet(0, 0, c, x, sizeof x, Clock::now() + 20s, Patience{});
    done = true;
  });
  std::this_thread::sleep_for(20ms);  // let it reach its futex sleep (the close must wake it)
  const auto closed_at = Clock::now();
  r.arena.close();
  waiter.join();
  EXPECT_LT(Clock::now() - closed_at, 2s);
  EXPECT_EQ(v, Verdict::slow);
  EXPECT_FALSE(r.arena.usable());
  EXPECT_EQ(r.arena.meet(1, 0, c, x, sizeof x, Clock::now() + 20s, kSpin), Verdict::slow);
}

// GPU ops: a different GPU (place) sends every peer the ordinary way; after a go the lead's
// conclusion, ok or an error with its text, is what every waiting peer hears, and a close or the
// give-up ends the wait too.
TEST(Arena, ThePlaceIsPartOfTheCallAndTheLeadsConclusionReachesEveryPeer) {
  Region r(3);
  auto c = all_reduce_call(4);
  c.place = 0x1234;
  auto elsewhere = c;
  elsewhere.place = 0x4321;
  EXPECT_EQ(meet_all(r.arena, 0, {c, elsewhere, c}), std::vector<Verdict>(3, Verdict::slow));
  EXPECT_EQ(meet_all(r.arena, 1, {c, c, c}), std::vector<Verdict>(3, Verdict::go));
  std::vector<Status> heard(3);
  std::vector<Arena::Heard> how(3, Arena::Heard::gave_up);
  std::thread lead([&] { r.arena.conclude(0, 1, Status(Errc::device_error, "cuda:0: out of memory")); });
  std::vector<std::thread> waiting;
  for (uint32_t p = 1; p < 3; ++p)
    waiting.emplace_back([&, p] { how[p] = r.arena.await_conclusion(0, 1, Clock::now() + 20s, kSpin, heard[p]); });
  lead.join();
  for (auto& t : waiting) t.join();
  for (uint32_t p = 1; p < 3; ++p) {
    EXPECT_EQ(how[p], Arena::Heard::concluded) << p;
    EXPECT_EQ(heard[p], Status(Errc::device_error, "cuda:0: out of memory")) << p;
  }
  EXPECT_EQ(meet_all(r.arena, 2, {c, c, c}), std::vector<Verdict>(3, Verdict::go));
  r.arena.conclude(0, 2, Status::ok());
  Status ok_heard(Errc::internal, "unset");
  EXPECT_EQ(r.arena.await_conclusion(0, 2, Clock::now() + 20s, kSpin, ok_heard), Arena::Heard::concluded);
  EXPECT_TRUE(ok_heard.is_ok()) << ok_heard.to_string();
  // Op 3 went but its lead never concludes: the wait ends at the give-up, or at once on a close.
  EXPECT_EQ(meet_all(r.arena, 3, {c, c, c}), std::vector<Verdict>(3, Verdict::go));
  Status none;
  const auto start = Clock::now();
  EXPECT_EQ(r.arena.await_conclusion(0, 3, Clock::now() + 30ms, kSpin, none), Arena::Heard::gave_up);
  EXPECT_GE(Clock::now() - start, 30ms);
  r.arena.close();
  EXPECT_EQ(r.arena.await_conclusion(0, 3, Clock::now() + 20s, kSpin, none), Arena::Heard::closed);
}

// Four peers run 400 ops; before each, every peer sleeps a random while and gives up after a
// random patience, so some ops go slow in every way (all late, one late, one giving up as the
// last one posts). Every op's verdict must be one and the same at every peer.
TEST(Arena, EveryPeerOfEveryOpGetsTheSameVerdictWhoeverIsLate) {
  constexpr uint32_t n = 4;
  constexpr uint64_t ops = 400;
  Region r(n);
  const auto c = all_reduce_call(8);
  std::vector<std::vector<Verdict>> seen(n, std::vector<Verdict>(ops));
  std::vector<std::thread> ts;
  for (uint32_t p = 0; p < n; ++p)
    ts.emplace_back([&, p] {
      std::mt19937 rng(p + 1);
      float x[8] = {};
      for (uint64_t s = 0; s < ops; ++s) {
        if (rng() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
        const auto patience = std::chrono::microseconds(rng() % 400);
        seen[p][s] = r.arena.meet(p, s, c, x, sizeof x, Clock::now() + patience, Patience{});
        // An op that went slow would run the ordinary way, which every peer of it enters: the
        // next op starts after every peer has finished this one.
        if (seen[p][s] == Verdict::slow) std::this_thread::sleep_for(std::chrono::microseconds(500));
      }
    });
  for (auto& t : ts) t.join();
  int go = 0;
  for (uint64_t s = 0; s < ops; ++s) {
    for (uint32_t p = 1; p < n; ++p) ASSERT_EQ(seen[p][s], seen[0][s]) << "op " << s << " peer " << p;
    go += seen[0][s] == Verdict::go;
  }
  EXPECT_GT(go, 0);
  EXPECT_LT(go, static_cast<int>(ops));  // the delays made some go slow
}

TEST(Arena, AReaderThatFellBehindLearnsItsInputsWereOverwritten) {
  Region r(2);
  const auto c = all_reduce_call(2);
  float a[2] = {1, 2}, b[2] = {10, 20};
  ASSERT_EQ(meet_all(r.arena, 0, {c, c}), std::vector<Verdict>(2, Verdict::go));
  ArenaOp op{OpDesc::of(OpKind::all_reduce, DType::f32, ReduceOp::sum, 0, 2), 2, 0};
  float out[2] = {};
  // Peer 1 moves two ops on (as it could after timeouts): its slot of op 0 holds op 2 now.
  r.arena.meet(1, 1, c, b, sizeof b, Clock::now(), kSpin);
  r.arena.meet(1, 2, c, a, sizeof a, Clock::now(), kSpin);
  const Status s = run_arena_op(r.arena, 0, op, out);
  EXPECT_EQ(s.code(), Errc::timeout);
  EXPECT_NE(s.message().find("overwritten"), std::string::npos) << s.to_string();
}

TEST(Arena, AttachChecksTheTagAndTheLayout) {
  Region r(3, 8192, 42);
  std::string why;
  EXPECT_TRUE(Arena::attach(r.mem.get(), r.bytes, 42, why).valid()) << why;
  EXPECT_FALSE(Arena::attach(r.mem.get(), r.bytes, 43, why).valid());
  EXPECT_NE(why.find("not this job's"), std::string::npos) << why;
  EXPECT_FALSE(Arena::attach(r.mem.get(), r.bytes - 64, 42, why).valid());
  EXPECT_NE(why.find("layout"), std::string::npos) << why;
  EXPECT_FALSE(Arena::attach(r.mem.get(), 16, 42, why).valid());
  const Arena attached = Arena::attach(r.mem.get(), r.bytes, 42, why);
  EXPECT_EQ(attached.peers(), 3u);
  EXPECT_EQ(attached.slot_bytes(), 8192u);
}

// The data phase of every op over 3 peers, each posting its own input, against plain loops.
TEST(ArenaOps, EveryOpReadsWhatItShouldFromEveryPeer) {
  constexpr uint32_t n = 3;
  constexpr std::size_t count = 5;
  for (OpKind kind : {OpKind::all_reduce, OpKind::reduce, OpKind::broadcast, OpKind::all_gather,
                      OpKind::reduce_scatter, OpKind::all_to_all, OpKind::gather, OpKind::scatter}) {
    SCOPED_TRACE(std::string(to_string(kind)));
    Region r(n);
    const uint32_t root = 1;
    const bool whole = kind == OpKind::reduce_scatter || kind == OpKind::all_to_all || kind == OpKind::scatter;
    const std::size_t in_len = whole ? n * count : count;
    // Peer p's input element i: 100 p + i.
    std::vector<std::vector<int32_t>> in(n, std::vector<int32_t>(in_len));
    for (uint32_t p = 0; p < n; ++p)
      for (std::size_t i = 0; i < in_len; ++i) in[p][i] = static_cast<int32_t>(100 * p + i);
    ArenaCall c;
    c.kind = kind;
    c.dtype = DType::i32;
    c.fits = true;
    c.count = count;
    std::vector<Verdict> v(n);
    std::vector<std::thread> ts;
    for (uint32_t p = 0; p < n; ++p)
      ts.emplace_back([&, p] {
        ArenaOp op{OpDesc::of(kind, DType::i32, ReduceOp::sum, static_cast<int>(root), count), n, p};
        v[p] = r.arena.meet(p, 0, c, in[p].data(), arena_input_bytes(op), Clock::now() + 2s, kSpin);
      });
    for (auto& t : ts) t.join();
    ASSERT_EQ(v, std::vector<Verdict>(n, Verdict::go));
    for (uint32_t p = 0; p < n; ++p) {
      SCOPED_TRACE("peer " + std::to_string(p));
      ArenaOp op{OpDesc::of(kind, DType::i32, ReduceOp::sum, static_cast<int>(root), count), n, p};
      const bool gathers = kind == OpKind::all_gather || kind == OpKind::gather || kind == OpKind::all_to_all;
      std::vector<int32_t> out(gathers ? n * count : count, -1);
      if (kind == OpKind::broadcast && p == root) out = in[p];  // the root's buffer is its input
      ASSERT_TRUE(run_arena_op(r.arena, 0, op, out.data()).is_ok());
      std::vector<int32_t> want(out.size(), -1);
      for (std::size_t i = 0; i < count; ++i) {
        int32_t sum = 0, block_sum = 0;
        for (uint32_t q = 0; q < n; ++q) sum += in[q][i], block_sum += whole ? in[q][p * count + i] : 0;
        switch (kind) {
          case OpKind::all_reduce: want[i] = sum; break;
          case OpKind::reduce: want[i] = p == root ? sum : -1; break;
          case OpKind::broadcast: want[i] = in[root][i]; break;
          case OpKind::reduce_scatter: want[i] = block_sum; break;
          case OpKind::scatter: want[i] = in[root][p * count + i]; break;
          default:
            for (uint32_t q = 0; q < n; ++q) {
              const int32_t from = kind == OpKind::all_to_all ? in[q][p * count + i] : in[q][i];
              want[q * count + i] = kind == OpKind::gather && p != root ? -1 : from;
            }
        }
      }
      EXPECT_EQ(out, want);
    }
  }
}

} // namespace
} // namespace chorus
