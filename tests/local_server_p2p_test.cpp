// LocalServerCore: point to point, reset and shutdown.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <chorus/config.hpp>
#include <chorus/runtime.hpp>
#include "core/op_kinds.hpp"
#include "runtime/runtime_impl.hpp"
#include "local_server_fixtures.hpp"
#include "strategies/work_buffer.hpp"
#include "testkit/process.hpp"

namespace chorus {
namespace {

// --- point to point

// The second half to arrive copies the sender's buffer into the receiver's (here the receive, on
// the test's thread): both come back done, with nothing left to run.
TEST_F(CoreTest, SendRecvMatchAndCopy) {
  reg_all(cfg(2));
  auto s = half(p2p(OpKind::send, 0, 1, f32(4), 7), 3.5f);
  EXPECT_FALSE(is_done(*s.reply));
  auto r = half(p2p(OpKind::recv, 1, 0, f32(4), 7));
  ASSERT_TRUE(is_done(*s.reply));
  ASSERT_TRUE(is_done(*r.reply));
  ASSERT_TRUE(s.reply->status.is_ok()) << s.reply->status.to_string();
  ASSERT_TRUE(r.reply->status.is_ok()) << r.reply->status.to_string();
  EXPECT_EQ(r.values(), std::vector<float>(4, 3.5f));
  for (const auto& h : {s, r}) {
    EXPECT_TRUE(h.reply->copied);
    EXPECT_EQ(h.reply->plan, nullptr);
    EXPECT_EQ(h.reply->strategy.path, RunStrategy::Path::p2p);
  }
  EXPECT_EQ(s.reply->rank, 0);
  EXPECT_EQ(r.reply->rank, 1);
}

// Above CHORUS_P2P_LOCAL_EAGER_KIB (256 KiB unless set) the pair becomes a two-peer plan, which
// the receiver's thread copies once both run it: nothing has moved when they are answered.
TEST_F(CoreTest, ALargePairBecomesAPlanOfTheTwo) {
  reg_all(cfg(2));
  const int64_t n = (256 << 10) / 4 + 1;
  auto s = half(p2p(OpKind::send, 0, 1, f32(n), 7), 3.5f);
  auto r = half(p2p(OpKind::recv, 1, 0, f32(n), 7));
  ASSERT_TRUE(s.reply->status.is_ok() && r.reply->status.is_ok()) << s.reply->status.to_string();
  ASSERT_NE(s.reply->plan, nullptr);
  EXPECT_EQ(s.reply->plan, r.reply->plan);
  EXPECT_FALSE(s.reply->copied || r.reply->copied);
  EXPECT_EQ(s.reply->plan->count(), static_cast<std::size_t>(n));
  EXPECT_EQ(s.reply->plan->label(), "send/recv 0->1 tag 7");
  EXPECT_EQ(s.reply->rank, 0);
  EXPECT_EQ(r.reply->rank, 1);
  EXPECT_EQ(r.values()[0], 0.0f);
}

TEST_F(CoreTest, SendToSelfAndToANonPeer) {
  reg_all(cfg(3));
  auto s = op(p2p(OpKind::send, 1, 1, f32(4)));
  EXPECT_TRUE(has(s->status, Errc::invalid_argument, {"peer 1: send to peer 1 (itself)"}));
  auto r = op(p2p(OpKind::recv, 2, 2, f32(4)));
  EXPECT_TRUE(has(r->status, Errc::invalid_argument, {"peer 2: recv from peer 2 (itself)"}));
  auto far = op(p2p(OpKind::send, 0, 3, f32(4)));
  EXPECT_TRUE(has(far->status, Errc::invalid_argument, {"peer 0: send to peer 3 (not a peer)"}));
  auto nobuf = op(p2p(OpKind::send, 0, 1, none()));
  EXPECT_TRUE(has(nobuf->status, Errc::invalid_argument, {"peer 0: send without a buffer"}));
  for (auto* rejected : {&s, &r, &far, &nobuf})
    EXPECT_EQ((*rejected)->timer, 0u) << "rejected halves must not wait: their waiter has nothing to expire";
}

TEST_F(CoreTest, SendRecvMismatches) {
  reg_all(cfg(2));
  auto s = op(p2p(OpKind::send, 0, 1, f32(4)));
  auto r = op(p2p(OpKind::recv, 1, 0, meta(DType::f64, {4})));
  EXPECT_TRUE(has(s->status, Errc::dtype_mismatch, {"send/recv 0->1 tag 0", "sender has f32[4], receiver f64[4]"}));
  EXPECT_EQ(r->status, s->status);
  s = op(p2p(OpKind::send, 1, 0, f32(4), 3));
  r = op(p2p(OpKind::recv, 0, 1, f32(5), 3));
  EXPECT_TRUE(has(r->status, Errc::shape_mismatch, {"send/recv 1->0 tag 3", "sender has f32[4], receiver f32[5]"}));
  EXPECT_EQ(r->status, s->status);
  // The next pair works.
  s = op(p2p(OpKind::send, 0, 1, f32(4)));
  r = op(p2p(OpKind::recv, 1, 0, f32(4)));
  EXPECT_TRUE(s->status.is_ok() && r->status.is_ok());
}

TEST_F(CoreTest, SendRecvAreMatchedFifoPerTag) {
  reg_all(cfg(2));
  auto s1 = half(p2p(OpKind::send, 0, 1, f32(4)), 1);
  auto s2 = half(p2p(OpKind::send, 0, 1, f32(8)), 2);
  auto other_tag = half(p2p(OpKind::send, 0, 1, f32(16), 1), 9);
  auto r1 = half(p2p(OpKind::recv, 1, 0, f32(4)));
  auto r2 = half(p2p(OpKind::recv, 1, 0, f32(8)));
  for (const auto& h : {s1, s2, r1, r2}) EXPECT_TRUE(h.reply->status.is_ok()) << h.reply->status.to_string();
  EXPECT_EQ(r1.values(), std::vector<float>(4, 1.0f));
  EXPECT_EQ(r2.values(), std::vector<float>(8, 2.0f));
  EXPECT_FALSE(is_done(*other_tag.reply));
}

TEST_F(CoreTest, SendTimeoutNamesTheMissingReceiver) {
  reg_all(cfg(3, 120));
  auto s = op(p2p(OpKind::send, 0, 2, f32(4), 5));
  ASSERT_FALSE(is_done(*s));
  ASSERT_NE(s->timer, 0u) << "a waiting half carries the timer its waiter expires";
  core->on_timeout(s->timer);
  ASSERT_TRUE(is_done(*s));
  EXPECT_TRUE(has(s->status, Errc::timeout,
                  {"send 0->2 tag 5", "peer 2 never posted the matching recv within 120 ms"}));
  // The failed half is gone: a recv posted now waits for a new send.
  auto r = op(p2p(OpKind::recv, 2, 0, f32(4), 5));
  EXPECT_FALSE(is_done(*r));
  auto s2 = op(p2p(OpKind::send, 0, 2, f32(4), 5));
  EXPECT_TRUE(r->status.is_ok() && s2->status.is_ok());
}

TEST_F(CoreTest, RecvTimeoutNamesTheMissingSender) {
  reg_all(cfg(3, 120));
  auto r = op(p2p(OpKind::recv, 2, 1, f32(4)));
  ASSERT_NE(r->timer, 0u);
  core->on_timeout(r->timer);
  EXPECT_TRUE(has(r->status, Errc::timeout, {"recv 1->2 tag 0", "peer 1 never posted the matching send within 120 ms"}));
}

TEST_F(CoreTest, TimeoutOfOneQueuedHalfLeavesTheOthers) {
  reg_all(cfg(2));
  auto s1 = op(p2p(OpKind::send, 0, 1, f32(4)));
  auto s2 = op(p2p(OpKind::send, 0, 1, f32(8)));
  ASSERT_NE(s1->timer, 0u);
  ASSERT_NE(s2->timer, 0u);
  ASSERT_NE(s1->timer, s2->timer) << "each queued half has its own timer";
  core->on_timeout(s1->timer);
  EXPECT_EQ(s1->status.code(), Errc::timeout);
  EXPECT_FALSE(is_done(*s2));
  auto r = op(p2p(OpKind::recv, 1, 0, f32(8)));
  EXPECT_TRUE(s2->status.is_ok() && r->status.is_ok()) << s2->status.to_string() << r->status.to_string();
  core->on_timeout(s2->timer);  // stale: s2 was matched
  EXPECT_TRUE(s2->status.is_ok());
}

// A receive from any source (OpRequestData::any_source).
OpRequestData any_recv(uint32_t peer, TensorMeta t, uint64_t tag) {
  OpRequestData r = p2p(OpKind::recv, peer, 0, std::move(t), tag);
  r.any_source = true;
  return r;
}

// A receive from any source takes the send to it queued first, from whichever peer, and learns
// the sender; sends of another tag or to another peer stay queued.
TEST_F(CoreTest, ARecvFromAnySourceTakesTheFirstSendToIt) {
  reg_all(cfg(4));
  auto other_tag = op(p2p(OpKind::send, 3, 0, f32(4), 6));
  auto other_dst = op(p2p(OpKind::send, 3, 1, f32(4), 5));
  auto from2 = half(p2p(OpKind::send, 2, 0, f32(4), 5), 2);
  auto from1 = half(p2p(OpKind::send, 1, 0, f32(8), 5), 1);
  auto r1 = half(any_recv(0, f32(4), 5));
  ASSERT_TRUE(is_done(*r1.reply) && is_done(*from2.reply));
  ASSERT_TRUE(r1.reply->status.is_ok()) << r1.reply->status.to_string();
  EXPECT_EQ(r1.reply->source, 2u);
  EXPECT_EQ(r1.values(), std::vector<float>(4, 2.0f));
  EXPECT_FALSE(is_done(*from1.reply));
  auto r2 = half(any_recv(0, f32(8), 5));
  ASSERT_TRUE(is_done(*r2.reply) && is_done(*from1.reply));
  EXPECT_EQ(r2.reply->source, 1u);
  EXPECT_EQ(r2.values(), std::vector<float>(8, 1.0f));
  EXPECT_FALSE(is_done(*other_tag));
  EXPECT_FALSE(is_done(*other_dst));
  // A mismatch fails both sides, naming the sender it took.
  auto from3 = op(p2p(OpKind::send, 3, 0, f32(2), 9));
  auto r3 = op(any_recv(0, f32(4), 9));
  EXPECT_TRUE(has(r3->status, Errc::shape_mismatch, {"send/recv 3->0 tag 9", "sender has f32[2], receiver f32[4]"}));
  EXPECT_EQ(from3->status, r3->status);
}

// A send goes to the receive posted first of those that may take it: from its peer or from any.
TEST_F(CoreTest, ASendGoesToTheReceivePostedFirst) {
  reg_all(cfg(3));
  auto any = half(any_recv(0, f32(4), 1));
  auto from1 = half(p2p(OpKind::recv, 0, 1, f32(4), 1));
  auto s1 = half(p2p(OpKind::send, 1, 0, f32(4), 1), 1);  // the send copies, on its arrival
  ASSERT_TRUE(is_done(*any.reply) && is_done(*s1.reply));
  EXPECT_EQ(any.values(), std::vector<float>(4, 1.0f));
  EXPECT_EQ(any.reply->source, 1u);
  EXPECT_FALSE(is_done(*from1.reply));
  EXPECT_EQ(from1.values(), std::vector<float>(4, 0.0f));
  auto s2 = half(p2p(OpKind::send, 1, 0, f32(4), 1), 2);
  EXPECT_EQ(from1.values(), std::vector<float>(4, 2.0f));
  // The other way round: the specific receive first.
  auto specific = half(p2p(OpKind::recv, 0, 2, f32(4), 1));
  auto any2 = half(any_recv(0, f32(4), 1));
  auto s3 = half(p2p(OpKind::send, 2, 0, f32(4), 1), 3);
  EXPECT_EQ(specific.values(), std::vector<float>(4, 3.0f));
  EXPECT_FALSE(is_done(*any2.reply));
  EXPECT_EQ(any2.values(), std::vector<float>(4, 0.0f));
}

// A receive from any source expires naming what it waited for; one withdrawn (it took a message
// from another node) leaves without an answer, and a later send does not pair with it.
TEST_F(CoreTest, ARecvFromAnySourceExpiresOrIsWithdrawn) {
  reg_all(cfg(2));
  auto r = op(any_recv(1, f32(4), 3));
  core->on_timeout(r->timer);
  EXPECT_TRUE(has(r->status, Errc::timeout, {"recv any->1 tag 3: no peer sent to peer 1 with tag 3 within"}));
  auto w = half(any_recv(1, f32(4), 3));
  EXPECT_TRUE(core->withdraw(w.reply->timer));
  EXPECT_FALSE(core->withdraw(w.reply->timer));
  auto s = half(p2p(OpKind::send, 0, 1, f32(4), 3), 5);
  EXPECT_FALSE(is_done(*w.reply));
  EXPECT_FALSE(is_done(*s.reply));
  // A plain receive from the id that stands for "any" is no receive from any source.
  auto bad = op(p2p(OpKind::recv, 1, kAnySource, f32(4), 3));
  EXPECT_TRUE(has(bad->status, Errc::invalid_argument, {"peer 1: recv from peer 4294967295 (not a peer)"}));
  auto r2 = half(any_recv(1, f32(4), 3));
  EXPECT_TRUE(r2.reply->status.is_ok());
  EXPECT_TRUE(is_done(*s.reply));
  EXPECT_EQ(r2.values(), std::vector<float>(4, 5.0f));
  EXPECT_EQ(w.values(), std::vector<float>(4, 0.0f)) << "a withdrawn receive takes nothing";
  EXPECT_FALSE(core->withdraw(r2.reply->timer)) << "a paired receive cannot be withdrawn";
}

// --- reset and shutdown

TEST_F(CoreTest, ResetFailsEverythingInFlightAndAllowsRegisteringAgain) {
  reg_all(cfg(3));
  auto c0 = op(all_reduce_req(0, 0));
  auto c1 = op(all_reduce_req(1, 0));
  auto s = op(p2p(OpKind::send, 2, 0, f32(4)));
  ASSERT_TRUE(reset(1).is_ok());
  for (auto* r : {&c0, &c1, &s}) {
    ASSERT_TRUE(is_done(**r));
    EXPECT_TRUE(has((*r)->status, Errc::reset, {"reset by peer 1"}));
  }
  EXPECT_EQ(core->pending_ops(), 0u);
  for (auto* r : {&c0, &c1, &s}) core->on_timeout((*r)->timer);  // their waiters' deadlines pass after the reset
  // The old registrations are gone...
  auto stale = op(all_reduce_req(0, 1));
  EXPECT_TRUE(has(stale->status, Errc::not_registered, {"peer 0"}));
  // ...and a new collective (even with another config) may register.
  reg_all(cfg(2, 250));
  expect_next_all_reduce_works(2, 0);
}

TEST_F(CoreTest, ResetWithNothingRegistered) {
  EXPECT_TRUE(reset(0).is_ok());
  reg_all(cfg(2));
  expect_next_all_reduce_works(2, 0);
}

TEST_F(CoreTest, ResetAlsoForgetsTombstones) {
  reg_all(cfg(2));
  auto r0 = op(all_reduce_req(0, 0));
  core->on_timeout(r0->timer);
  EXPECT_EQ(r0->status.code(), Errc::timeout);
  ASSERT_TRUE(reset(0).is_ok());
  EXPECT_EQ(core->pending_ops(), 0u);
  reg_all(cfg(2));
  expect_next_all_reduce_works(2, 0);
}

TEST_F(CoreTest, DestroyingTheCoreFailsWaitingCalls) {
  reg_all(cfg(3));
  auto c = op(all_reduce_req(0, 0));
  auto s = op(p2p(OpKind::recv, 1, 2, f32(4)));
  core.reset();
  for (auto* r : {&c, &s}) {
    ASSERT_TRUE(is_done(**r));
    EXPECT_TRUE(has((*r)->status, Errc::reset, {"the local server stopped"}));
  }
}

} // namespace
} // namespace chorus
