// LocalServerCore: the strategy each op reports, and nothing that may block under the core's lock.
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
#include "strategies/planner.hpp"
#include "strategies/work_buffer.hpp"
#include "testkit/process.hpp"

namespace chorus {
namespace {

// --- the strategy that runs

// Every reply of an op names what runs it, and that is what the tuning module picks for the op.
TEST_F(CoreTest, RepliesCarryTheStrategyTheTuningModulePicked) {
  const Config c = cfg(3);
  reg_all(c);
  Topology three;
  three.peers = 3;
  const int64_t large = static_cast<int64_t>(c.auto_threshold_bytes / 4);
  uint64_t seq = 0;
  for (int64_t count : {int64_t{4}, large - 1, large, large * 4}) {
    auto replies = collective({all_reduce_req(0, seq, count), all_reduce_req(1, seq, count), all_reduce_req(2, seq, count)});
    ++seq;
    expect_all_planned(replies);
    PlanQuery q(OpDesc::of(OpKind::all_reduce, DType::f32, ReduceOp::sum, 0, static_cast<std::size_t>(count)));
    q.topology = three;
    const RunStrategy picked = plan_path(c, q);
    EXPECT_EQ(picked, RunStrategy::flat({count < large ? Algorithm::centralized : Algorithm::direct, 2})) << count;
    for (auto& r : replies) EXPECT_EQ(r->strategy, picked) << count;
  }
  auto barrier = collective({req(0, seq, OpKind::barrier), req(1, seq, OpKind::barrier), req(2, seq, OpKind::barrier)});
  for (auto& r : barrier) EXPECT_EQ(to_string(r->strategy), "centralized");
  auto s = op(p2p(OpKind::send, 0, 2, f32(4)));
  auto r = op(p2p(OpKind::recv, 2, 0, f32(4)));
  ASSERT_TRUE(s->status.is_ok() && r->status.is_ok());
  EXPECT_EQ(to_string(s->strategy), "p2p");
  EXPECT_EQ(to_string(r->strategy), "p2p");
}

TEST_F(CoreTest, AFixedStrategyIsReportedAsNamed) {
  reg_all(cfg(2, 200, "tree:3"));
  auto replies = collective({all_reduce_req(0, 0, 1 << 20), all_reduce_req(1, 0, 1 << 20)});
  expect_all_planned(replies);
  for (auto& r : replies) EXPECT_EQ(to_string(r->strategy), "tree:3");
}

// A caller's per-op timeout (OpOptions::timeout, Call::timeout) bounds the plan's steps too, not
// only the wait for the others: the plan of one process ends by the shortest bound among its
// callers. Rank 1 never runs its part here; rank 0's run fails at rank 1's 300 ms, not at the
// configuration's 60 s.
TEST_F(CoreTest, APlanEndsByItsCallersShortestTimeout) {
  reg_all(cfg(2, 60000));
  std::vector<std::shared_ptr<Reply>> replies;
  for (uint32_t p = 0; p < 2; ++p) {
    Call call = op_call(all_reduce_req(p, 0, 1 << 18));
    call.timeout = p == 1 ? ms(300) : ms(60000);
    replies.push_back(call.reply);
    core->on_op(std::move(call));
  }
  expect_all_planned(replies);
  OpPlan& plan = *replies[0]->plan;
  std::vector<float> in(1 << 18, 1.0f), out(1 << 18);
  WorkBuffer w = WorkBuffer::bind(plan.kind(), 0, plan.size(), plan.root(), plan.count(), plan.dtype(),
                                  reinterpret_cast<const std::byte*>(in.data()), reinterpret_cast<std::byte*>(out.data()));
  auto ran = std::async(std::launch::async, [&] { return plan.run(0, w); });
  ASSERT_EQ(ran.wait_for(std::chrono::seconds(20)), std::future_status::ready) << "the plan outlived its callers' bound";
  const Status s = ran.get();
  EXPECT_EQ(s.code(), Errc::timeout) << s.to_string();
}

// --- nothing that may block runs under the core's lock

// Where a launch makes an op's plan, a GPU run or a send/recv pair's copy (and, across nodes, calls
// GlobalClient::begin_op: the same hook), another thread finds the core's lock free.
TEST_F(CoreTest, LaunchesRunWithoutTheCoresLock) {
  std::vector<std::pair<std::string, bool>> seen;
  core->set_launch_hook([&](std::string_view stage) {
    // Asked from another thread: a thread must not try to lock a mutex it holds.
    const bool free = std::async(std::launch::async, [&] { return core->lock_is_free(); }).get();
    seen.emplace_back(std::string(stage), free);
  });
  reg_all(cfg(2));
  expect_all_planned(collective({all_reduce_req(0, 0), all_reduce_req(1, 0)}));
  // GPU tensors: without such a GPU the run fails (after the hook), the same for both peers.
  float dummy[4] = {};
  std::vector<std::shared_ptr<Reply>> gpu;
  for (uint32_t p = 0; p < 2; ++p) {
    Call call = op_call(all_reduce_req(p, 1));
    call.input = call.output = Tensor::borrow(dummy, DType::f32, {4}, Device::cuda(64));
    gpu.push_back(call.reply);
    core->on_op(std::move(call));
  }
  for (auto& r : gpu) ASSERT_TRUE(is_done(*r));
  EXPECT_EQ(gpu[0]->status.code(), Errc::device_error) << gpu[0]->status.to_string();
  EXPECT_EQ(gpu[1]->status, gpu[0]->status);
  auto s = op(p2p(OpKind::send, 0, 1, f32(4)));
  auto r = op(p2p(OpKind::recv, 1, 0, f32(4)));
  ASSERT_TRUE(s->status.is_ok() && r->status.is_ok());
  const std::vector<std::pair<std::string, bool>> expected{{"host", true}, {"device", true}, {"pair", true}};
  EXPECT_EQ(seen, expected);
}

// The probe itself: where the core does hold its lock, another thread finds it taken. An expired
// request's buffers are let go under it (fail_op drops the arrivals): the keep-alive of the
// caller's tensor probes there.
TEST(CoreLock, TheProbeSeesTheLockWhereItIsHeld) {
  std::vector<bool> free_when_dropped;
  LocalServerCore core;
  g_epoch = 0;  // a fresh core's registrations
  EXPECT_TRUE(core.lock_is_free());
  for (uint32_t p = 0; p < 2; ++p) {
    Call call = register_call(p, cfg(2));
    core.on_register(std::move(call));
  }
  float data[4] = {};
  Call call = op_call(all_reduce_req(0, 0));
  call.input = Tensor::wrap(data, DType::f32, {4}, Device::cpu(), std::shared_ptr<void>(data, [&](void*) {
    free_when_dropped.push_back(std::async(std::launch::async, [&] { return core.lock_is_free(); }).get());
  }));
  auto reply = call.reply;
  core.on_op(std::move(call));
  EXPECT_FALSE(is_done(*reply)) << reply->status.to_string();
  EXPECT_TRUE(free_when_dropped.empty()) << "a waiting request keeps its buffers";
  core.on_timeout(reply->timer);  // as its waiter does past the deadline
  ASSERT_TRUE(is_done(*reply));
  EXPECT_EQ(reply->status.code(), Errc::timeout) << reply->status.to_string();
  EXPECT_EQ(free_when_dropped, std::vector<bool>{false});
  EXPECT_TRUE(core.lock_is_free());
}

// Across nodes the launch calls GlobalClient::begin_op (it writes announcement frames to the other
// nodes' connections) without the core's lock: two nodes, each a Runtime of this process, joined
// through the orchestrator daemon.
TEST(CoreLock, BeginOpRunsWithoutTheCoresLockAcrossNodes) {
  auto orch = testkit::start_orchestrator({"--port", "0", "--nodes", "2", "--heartbeat-ms", "500"});
  testkit::ChildGuard daemon{orch.pid};
  ASSERT_GT(orch.pid, 0) << orch.error;
  const uint16_t port = orch.port;
  Config c;
  c.num_devices = 1;
  c.num_nodes = 2;
  c.orchestrator_address = "127.0.0.1:" + std::to_string(port);
  c.node_address = "127.0.0.1";
  c.timeout = ms(10000);
  // Over the network: on one host the nodes' small ops would meet in the arena, launching nothing.
  c.host_transport = HostTransport::network;
  Runtime nodes[2];
  std::vector<std::pair<std::string, bool>> seen[2];
  for (int k = 0; k < 2; ++k) {
    LocalServerCore& core = *RuntimeAccess::impl(nodes[k]).core;
    core.set_launch_hook([&core, &seen, k](std::string_view stage) {
      const bool free = std::async(std::launch::async, [&] { return core.lock_is_free(); }).get();
      seen[k].emplace_back(std::string(stage), free);
    });
  }
  std::vector<std::thread> threads;
  for (int k = 0; k < 2; ++k)
    threads.emplace_back([&, k] {
      auto peer = nodes[k].register_peer(0, c);
      ASSERT_TRUE(peer.is_ok()) << peer.status().to_string();
      Tensor t = Tensor::from(std::vector<float>{1, 2, 3});
      ASSERT_TRUE(peer->all_reduce(t, ReduceOp::sum).is_ok());
      EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{2, 4, 6}));
      EXPECT_TRUE(peer->finish().is_ok());
    });
  for (auto& t : threads) t.join();
  const std::vector<std::pair<std::string, bool>> expected{{"global", true}};
  EXPECT_EQ(seen[0], expected);
  EXPECT_EQ(seen[1], expected);
}

} // namespace
} // namespace chorus
