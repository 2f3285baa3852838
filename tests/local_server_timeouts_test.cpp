// LocalServerCore: timeouts (a request expires when its waiter calls on_timeout(reply->timer), as
// the runtime's peer threads do past their deadline), and peer threads entering the core at once.
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
#include "runtime/runtime_impl.hpp"
#include "local_server_fixtures.hpp"
#include "strategies/work_buffer.hpp"
#include "testkit/process.hpp"

namespace chorus {
namespace {

// --- timeouts, expired as the waiter does

TEST_F(CoreTest, TimeoutNamesThePeerThatNeverCalledThenTheLatePeerGetsTheSameError) {
  reg_all(cfg(3, 200));
  auto r0 = op(all_reduce_req(0, 0));
  auto r1 = op(all_reduce_req(1, 0));
  ASSERT_NE(r0->timer, 0u);
  EXPECT_EQ(r1->timer, r0->timer) << "one timer per op, given by the first arrival";
  EXPECT_FALSE(is_done(*r0));
  core->on_timeout(r0->timer);
  ASSERT_TRUE(is_done(*r0));
  ASSERT_TRUE(is_done(*r1));
  EXPECT_TRUE(has(r0->status, Errc::timeout, {"all_reduce #0", "peer 2 never called within 200 ms"}));
  EXPECT_EQ(r1->status, r0->status);
  EXPECT_EQ(core->pending_ops(), 1u) << "a tombstone waits for the late peer";
  // Peer 1's deadline passes too: nothing changes.
  core->on_timeout(r1->timer);
  auto r2 = op(all_reduce_req(2, 0));
  ASSERT_TRUE(is_done(*r2)) << "the late peer is answered at once";
  EXPECT_EQ(r2->status, r0->status);
  EXPECT_EQ(core->pending_ops(), 0u);
  expect_next_all_reduce_works(3, 1);
}

TEST_F(CoreTest, TimeoutNamesEveryMissingPeer) {
  reg_all(cfg(5, 150));
  auto r = op(req(3, 0, OpKind::barrier));
  ASSERT_NE(r->timer, 0u);
  core->on_timeout(r->timer);
  EXPECT_TRUE(has(r->status, Errc::timeout, {"barrier #0", "peers 0, 1, 2, 4 never called within 150 ms"}));
  // The late peers each get the same error, and the next op still works.
  for (uint32_t p : {0u, 1u, 2u, 4u}) {
    auto late = op(req(p, 0, OpKind::barrier));
    ASSERT_TRUE(is_done(*late));
    EXPECT_EQ(late->status, r->status);
  }
  EXPECT_EQ(core->pending_ops(), 0u);
  expect_next_all_reduce_works(5, 1);
}

TEST_F(CoreTest, TimeoutOfOneOpLeavesLaterOpsAlone) {
  reg_all(cfg(2));
  auto a0 = op(all_reduce_req(0, 0));  // op #0: peer 1 never calls it in time
  auto b0 = op(all_reduce_req(0, 1));  // op #1 already open too
  ASSERT_NE(a0->timer, 0u);
  ASSERT_NE(b0->timer, 0u);
  ASSERT_NE(a0->timer, b0->timer) << "each op has its own timer";
  core->on_timeout(a0->timer);
  EXPECT_TRUE(has(a0->status, Errc::timeout, {"all_reduce #0", "peer 1"}));
  EXPECT_FALSE(is_done(*b0));
  auto a1 = op(all_reduce_req(1, 0));
  EXPECT_EQ(a1->status, a0->status);
  auto b1 = op(all_reduce_req(1, 1));
  ASSERT_TRUE(is_done(*b0));
  EXPECT_TRUE(b0->status.is_ok()) << b0->status.to_string();
  EXPECT_TRUE(b1->status.is_ok()) << b1->status.to_string();
}

TEST_F(CoreTest, UnknownTimerKeysAreHarmless) {
  core->on_timeout(0);
  core->on_timeout(12345);
  reg_all(cfg(2));
  core->on_timeout(1);
  expect_next_all_reduce_works(2, 0);
}

// --- every waiting request carries its own timer, which any of its waiters may expire

TEST_F(CoreTest, EveryWaitingRequestCarriesItsOwnTimer) {
  reg_all(cfg(3, 180));
  auto r0 = op(all_reduce_req(0, 0));
  auto s = op(p2p(OpKind::send, 0, 1, f32(4)));
  Call call;
  call.group = GroupRequestData{2, g_epoch.load(), {0, 2}};
  auto g = call.reply;
  core->on_group(std::move(call));
  ASSERT_FALSE(is_done(*r0) || is_done(*s) || is_done(*g)) << "each one waits for another peer";
  const std::set<uint64_t> timers{r0->timer, s->timer, g->timer};
  EXPECT_EQ(timers.size(), 3u) << "an op, a send/recv half and a group request each have their own timer";
  EXPECT_FALSE(timers.count(0)) << "a waiting request always carries a timer";
  // Each one expires alone, naming who never came.
  core->on_timeout(g->timer);
  ASSERT_TRUE(is_done(*g));
  EXPECT_TRUE(has(g->status, Errc::timeout, {"new group: peer 0 never asked for it within 180 ms"}));
  EXPECT_FALSE(is_done(*r0) || is_done(*s));
  core->on_timeout(s->timer);
  EXPECT_TRUE(has(s->status, Errc::timeout, {"send 0->1 tag 0", "peer 1 never posted the matching recv within 180 ms"}));
  EXPECT_FALSE(is_done(*r0));
  core->on_timeout(r0->timer);
  EXPECT_TRUE(has(r0->status, Errc::timeout, {"all_reduce #0", "peers 1, 2 never called within 180 ms"}));
}

TEST_F(CoreTest, AnyPeersWaiterExpiresTheOpForEveryone) {
  reg_all(cfg(3, 250));
  auto r0 = op(all_reduce_req(0, 0));
  auto r1 = op(all_reduce_req(1, 0));
  ASSERT_NE(r0->timer, 0u);
  EXPECT_EQ(r1->timer, r0->timer) << "one timer per op";
  EXPECT_FALSE(is_done(*r0));
  core->on_timeout(r1->timer);  // peer 1's deadline passed first
  ASSERT_TRUE(is_done(*r0) && is_done(*r1));
  EXPECT_TRUE(has(r0->status, Errc::timeout, {"all_reduce #0", "peer 2 never called within 250 ms"}));
  EXPECT_EQ(r1->status, r0->status);
  core->on_timeout(r0->timer);  // peer 0's deadline passes too: nothing changes
  EXPECT_EQ(r0->status.code(), Errc::timeout);
  auto r2 = op(all_reduce_req(2, 0));
  ASSERT_TRUE(is_done(*r2));
  EXPECT_EQ(r2->status, r0->status);
  expect_next_all_reduce_works(3, 1);
  // Point to point halves carry their own timer.
  auto s = op(p2p(OpKind::send, 2, 0, f32(4), 4));
  ASSERT_NE(s->timer, 0u);
  core->on_timeout(s->timer);
  EXPECT_TRUE(has(s->status, Errc::timeout, {"send 2->0 tag 4", "peer 0 never posted the matching recv"}));
}

TEST_F(CoreTest, ConcurrentPeerThreadsEnterTheCoreDirectly) {
  // As the runtime's peer threads do: each thread submits its ops straight into the core and waits
  // on its reply. Every 7th op has a mismatch; every peer must see the same outcome for every op.
  constexpr uint32_t n = 4;
  constexpr int num_ops = 300;
  reg_all(cfg(n, 5000));
  std::vector<std::vector<Status>> got(n, std::vector<Status>(num_ops));
  std::vector<std::thread> threads;
  for (uint32_t p = 0; p < n; ++p)
    threads.emplace_back([&, p] {
      for (int k = 0; k < num_ops; ++k) {
        const bool bad = k % 7 == 3 && p == k % n;
        OpRequestData r = k % 2 ? req(p, k, OpKind::barrier) : all_reduce_req(p, k, bad ? 5 : 4);
        if (k % 2 && bad) r = all_reduce_req(p, k);
        Call call = op_call(r);
        auto reply = call.reply;
        core->on_op(std::move(call));
        if (!reply->done.wait_at_least(1, Clock::now() + 5s)) {
          core->on_timeout(reply->timer);
          reply->done.wait_at_least(1, Clock::now() + 1s);
        }
        got[p][k] = reply->status;
      }
    });
  for (auto& t : threads) t.join();
  for (int k = 0; k < num_ops; ++k) {
    const bool bad = k % 7 == 3;
    if (bad) {
      EXPECT_TRUE(has(got[0][k], k % 2 ? Errc::op_mismatch : Errc::shape_mismatch,
                      {std::string("#").append(std::to_string(k)), std::string("peer ").append(std::to_string(k % n))}))
          << k;
    } else {
      EXPECT_TRUE(got[0][k].is_ok()) << k << ": " << got[0][k].to_string();
    }
    for (uint32_t p = 1; p < n; ++p) EXPECT_EQ(got[p][k], got[0][k]) << "op " << k << " peer " << p;
  }
  EXPECT_EQ(core->pending_ops(), 0u);
}

} // namespace
} // namespace chorus
