// A lost node ends every wait of every collective on this node at once, the local phase included:
//  * LocalServerCore alone, told of a loss as the global client tells it (on_node_lost): ops
//    waiting for this node's own peers, late peers of those ops, and ops begun after the loss all
//    fail with node_lost naming the node; send/recv pairs within the node go on;
//  * two nodes as two Runtimes of this process, joined through the orchestrator daemon: a peer
//    waiting for its node-mate when the other node's connection ends gets node_lost at once,
//    not after its op timeout, and so does its node-mate's next op;
//  * three nodes so: when the data connection between two of them breaks, the third, which has no
//    part in it, hears of it through the orchestrator at once, named by both ends and who saw it.
// (tests/multi_node_test.cpp does the same with node processes and a SIGKILL.)
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <chorus/runtime.hpp>
#include "actors/global_client/global_client.hpp"
#include "actors/local_server/server_core.hpp"
#include "runtime/runtime_impl.hpp"
#include "messages/data_codec.hpp"
#include "messages/peer_codec.hpp"
#include "status_matchers.hpp"
#include "test_events.hpp"
#include "testkit/process.hpp"
#include "two_nodes.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;
using ms = std::chrono::milliseconds;

bool is_done(const Reply& r) { return r.done.value.load() >= 1; }

// ---------------------------------------------------------------- LocalServerCore alone

class CoreNodeLoss : public ::testing::Test {
 protected:
  // No request is ever expired (on_timeout): whatever ends a wait here is the loss.
  std::shared_ptr<LocalServerCore> core = std::make_shared<LocalServerCore>();
  uint64_t epoch = 0;
  const Status loss{Errc::node_lost, "node 2 lost: the connection was closed"};

  void register_all(uint32_t n) {
    Config c;
    c.num_devices = n;
    c.timeout = 20s;
    for (uint32_t p = 0; p < n; ++p) {
      Call call;
      call.message = encode_register({protocol_version(), p, c});
      auto r = call.reply;
      core->on_register(std::move(call));
      ASSERT_TRUE(is_done(*r) && r->status.is_ok()) << r->status.to_string();
      epoch = r->epoch;
    }
  }
  std::shared_ptr<Reply> submit(OpRequestData req, Tensor in = {}, Tensor out = {}) {
    req.epoch = epoch;
    Call call;
    call.request = std::move(req);
    call.input = std::move(in);
    call.output = std::move(out);
    auto r = call.reply;
    core->on_op(std::move(call));
    return r;
  }
  std::shared_ptr<Reply> all_reduce(uint32_t peer, uint64_t seq) {
    OpRequestData r;
    r.peer = peer;
    r.op.seq = seq;
    r.op.kind = OpKind::all_reduce;
    r.input = r.output = {true, DType::f32, {4}};
    return submit(r);
  }
  // A send of four `mark`s, or a receive into `into` (its four floats), as a peer's carry them.
  std::shared_ptr<Reply> half(OpKind kind, uint32_t peer, uint32_t other, float mark = 0, Tensor into = {}) {
    OpRequestData r;
    r.peer = peer;
    r.op.kind = kind;
    r.other = other;
    (kind == OpKind::send ? r.input : r.output) = {true, DType::f32, {4}};
    if (kind == OpKind::send) return submit(r, Tensor::from(std::vector<float>(4, mark)));
    return submit(r, {}, into.defined() ? into : Tensor::zeros(DType::f32, {4}));
  }
};

TEST_F(CoreNodeLoss, AnOpWaitingForThisNodesPeersFailsAtOnceNamingTheNode) {
  register_all(3);
  auto first = all_reduce(0, 0);
  auto second = all_reduce(1, 0);
  ASSERT_FALSE(is_done(*first)) << "peer 2 has not called yet";
  core->on_node_lost(loss);
  ASSERT_TRUE(is_done(*first));
  ASSERT_TRUE(is_done(*second));
  EXPECT_EQ(first->status, Status(Errc::node_lost, "all_reduce #0: node 2 lost: the connection was closed"))
      << first->status.to_string();
  EXPECT_EQ(second->status, first->status);
  EXPECT_EQ(first->plan, nullptr);
  // The peer that had not called yet gets the same error at once, and the op is gone.
  auto late = all_reduce(2, 0);
  ASSERT_TRUE(is_done(*late));
  EXPECT_EQ(late->status, first->status);
  EXPECT_EQ(core->pending_ops(), 0u);
}

// The bug this guards against: a peer that finished the op in flight enters the next one while its
// node-mates, told of the loss, stop calling. It must not wait for them.
TEST_F(CoreNodeLoss, AnOpBegunAfterTheLossFailsAtItsFirstPeer) {
  register_all(2);
  core->on_node_lost(loss);
  auto r = all_reduce(0, 7);
  ASSERT_TRUE(is_done(*r)) << "the first peer of an op after a loss must not wait for its node-mates";
  EXPECT_EQ(r->status, Status(Errc::node_lost, "all_reduce #7: node 2 lost: the connection was closed"))
      << r->status.to_string();
  EXPECT_EQ(r->timer, 0u) << "nothing is left waiting, so no timer";
  EXPECT_EQ(core->pending_ops(), 0u);
  auto other = all_reduce(1, 7);
  ASSERT_TRUE(is_done(*other));
  EXPECT_EQ(other->status, r->status);
}

// Every op reports the first loss, whatever is lost after it.
TEST_F(CoreNodeLoss, TheFirstLossIsTheOneReported) {
  register_all(2);
  core->on_node_lost(loss);
  core->on_node_lost(Status(Errc::node_lost, "node 0 lost: the connection was closed"));
  auto r = all_reduce(0, 0);
  ASSERT_TRUE(is_done(*r));
  EXPECT_TRUE(has(r->status, Errc::node_lost, {"all_reduce #0: node 2 lost"})) << r->status.to_string();
}

// Pairs within the node need no other node: a half waiting at the loss and a pair made after it
// both run.
TEST_F(CoreNodeLoss, SendRecvWithinTheNodeGoOn) {
  register_all(2);
  auto waiting = half(OpKind::send, 0, 1, 7);
  core->on_node_lost(loss);
  EXPECT_FALSE(is_done(*waiting)) << "a send/recv half within the node is not failed by a loss";
  Tensor got = Tensor::zeros(DType::f32, {4});
  auto matched = half(OpKind::recv, 1, 0, 0, got);
  ASSERT_TRUE(is_done(*waiting) && is_done(*matched));
  ASSERT_TRUE(waiting->status.is_ok()) << waiting->status.to_string();
  ASSERT_TRUE(matched->status.is_ok()) << matched->status.to_string();
  EXPECT_EQ(got.to_vector<float>(), std::vector<float>(4, 7.0f));
  Tensor back = Tensor::zeros(DType::f32, {4});
  auto s = half(OpKind::send, 1, 0, 9);
  auto r = half(OpKind::recv, 0, 1, 0, back);
  ASSERT_TRUE(is_done(*s) && is_done(*r));
  EXPECT_TRUE(s->status.is_ok() && r->status.is_ok()) << s->status.to_string() << " / " << r->status.to_string();
  EXPECT_EQ(back.to_vector<float>(), std::vector<float>(4, 9.0f));
}

// ---------------------------------------------------------------- two nodes in this process

// One node has peers A and B, the other one peer. A calls an all-reduce while B holds back, so A
// waits in its node's local phase; then the other node ends its connection to A's without a
// goodbye (as a killed process's kernel would). A must get node_lost naming that node at once,
// not after its 20 s timeout; B's call of the same op, and A's next op, too.
TEST(NodeLossAcrossNodes, ALossEndsTheLocalPhaseAtOnce) {
  testing::EventCount entered;  // before the runtimes: node 0's local server raises it
  TwoNodes two;
  ASSERT_TRUE(two.join());
  auto& nodes = two.nodes;
  auto& a = two.a;
  auto& b = two.b;
  const std::string lost = two.lost();

  LocalServerCore& core0 = *RuntimeAccess::impl(nodes[0]).core;
  testing::count_server_entries(nodes[0], entered);  // no op has run yet
  Status first;
  auto returned = std::chrono::steady_clock::now();
  std::thread waiter([&] {
    Tensor x = Tensor::from(std::vector<float>{1, 2, 3});
    first = a->all_reduce(x, ReduceOp::sum);
    returned = std::chrono::steady_clock::now();
  });
  // Until A's call is in node 0's core, waiting for B.
  ASSERT_TRUE(entered.wait_for(1, 10s)) << "A's all_reduce never reached the core";
  ASSERT_EQ(core0.pending_ops(), 1u);
  const auto cut = std::chrono::steady_clock::now();
  two.cut();
  waiter.join();
  EXPECT_LT(returned - cut, 5s) << "A waited out its timeout instead of hearing of the loss";
  EXPECT_TRUE(has(first, Errc::node_lost, {"all_reduce #0: " + lost})) << first.to_string();
  // B's call of the op A waited in, and A's next op: the same loss, at once.
  Tensor y = Tensor::from(std::vector<float>{1, 2, 3});
  const auto t0 = std::chrono::steady_clock::now();
  Status late = b->all_reduce(y, ReduceOp::sum);
  Status next = a->barrier();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(late, first) << late.to_string();
  EXPECT_TRUE(has(next, Errc::node_lost, {"barrier #1: " + lost})) << next.to_string();
}

// Non-blocking ops in flight when the other node is lost: A hands in three all-reduces (B holds
// back, so the first waits in the local phase and the others behind it); every Work ends with
// node_lost naming the node at once, not after the 20 s timeout.
TEST(NodeLossAcrossNodes, ALossReachesEveryWorkInFlight) {
  testing::EventCount entered;
  TwoNodes two;
  ASSERT_TRUE(two.join());
  testing::count_server_entries(two.nodes[0], entered);  // no op has run yet
  std::vector<Tensor> xs;
  std::vector<Work> works;
  for (int i = 0; i < 3; ++i) {
    xs.push_back(Tensor::from(std::vector<float>{1, 2, 3}));
    works.push_back(two.a->all_reduce_async(xs.back(), ReduceOp::sum));
  }
  ASSERT_TRUE(entered.wait_for(1, 10s)) << "A's first all_reduce never reached the core";
  EXPECT_FALSE(works[0].test());
  two.cut();
  for (int i = 0; i < 3; ++i) {
    Status s = works[i].wait_for(5s);
    EXPECT_TRUE(has(s, Errc::node_lost, {"all_reduce #" + std::to_string(i) + ": " + two.lost()})) << i << ": " << s.to_string();
  }
}

// A node speaks for its own peers only: node 0 sends a point-to-point frame that claims to come
// from C, node 1's own peer. Node 1 ends the link as garbled: C's receive from A fails at once
// with node_lost naming node 0 and the pair, instead of waiting out its 20 s timeout.
TEST(NodeLossAcrossNodes, AMessageThatSpeaksForAnotherNodesPeerEndsTheLink) {
  TwoNodes two;
  ASSERT_TRUE(two.join());
  GlobalClient& forger = two.here();
  const uint32_t c = two.c->rank(), a = two.a->rank();
  static const int32_t value = 42;
  two.forge(FrameType::p2p_data, c, c, encode_p2p_header({c, c, 7, DType::i32, 1, Status::ok()}));
  two.forge_body(0, &value, sizeof value);
  Tensor t = Tensor::zeros(DType::i32, {1});
  const auto t0 = std::chrono::steady_clock::now();
  const Status got = two.c->recv(t, a, 7);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s) << "C waited out its timeout";
  EXPECT_TRUE(has(got, Errc::node_lost,
                  {"node " + std::to_string(forger.node_id()) + " sent a message from peer " + std::to_string(c) +
                   " to peer " + std::to_string(c) + ", not from its peers to this node's"}))
      << got.to_string();
  EXPECT_EQ(t.data_as<int32_t>()[0], 0) << "the forged message was taken";
}

// Three nodes of one peer each. Node C's peer calls an all-reduce the others never call, so it
// waits (20 s timeout); then node A cuts its data connection to node B off, as it does after a
// stall. C must fail at once with node_lost naming the link and who saw it (through the
// orchestrator), and B, the other end, with the same link as it saw it (a reset).
TEST(NodeLossAcrossNodes, ABrokenLinkIsToldToTheNodeOutsideIt) {
  auto orch = testkit::start_orchestrator({"--port", "0", "--nodes", "3", "--heartbeat-ms", "500"});
  testkit::ChildGuard daemon{orch.pid};
  ASSERT_GT(orch.pid, 0) << orch.error;
  Config c;
  c.num_devices = 1;
  c.num_nodes = 3;
  c.orchestrator_address = "127.0.0.1:" + std::to_string(orch.port);
  c.node_address = "127.0.0.1";
  c.timeout = 20s;
  Runtime nodes[3];
  std::vector<Result<Peer>> peers(3, Status(Errc::internal, "not registered"));
  std::vector<std::thread> joining;
  for (int i = 0; i < 3; ++i) joining.emplace_back([&, i] { peers[i] = nodes[i].register_peer(0, c); });
  for (auto& t : joining) t.join();
  for (auto& p : peers) ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  GlobalClient& a = *RuntimeAccess::impl(nodes[0]).global;
  GlobalClient& b = *RuntimeAccess::impl(nodes[1]).global;
  const std::string link = "the data connection between node " + std::to_string(std::min(a.node_id(), b.node_id())) +
                           " and node " + std::to_string(std::max(a.node_id(), b.node_id())) + " broke (node ";

  testing::EventCount entered;
  testing::count_server_entries(nodes[2], entered);  // no op has run yet
  Status waited;
  auto returned = std::chrono::steady_clock::now();
  std::thread waiter([&] {
    Tensor x = Tensor::from(std::vector<float>{1, 2, 3});
    waited = peers[2]->all_reduce(x, ReduceOp::sum);
    returned = std::chrono::steady_clock::now();
  });
  // C's call is in its node (on its way to wait for the others, or waiting): from here on the op
  // must end with the link's loss, whether it waits when the notice comes or starts after it.
  ASSERT_TRUE(entered.wait_for(1, 10s)) << "C's all_reduce never reached the core";
  const auto cut = std::chrono::steady_clock::now();
  a.cut_off(b.node_id(), "the test cuts the link");
  waiter.join();
  EXPECT_LT(returned - cut, 5s) << "C waited out its timeout instead of hearing of the link";
  // What the ends saw: A as it cut, B the reset. Both tell the orchestrator, which passes on the
  // first report it gets (either; B's may overtake A's); the ends keep their own.
  const Status a_saw(Errc::node_lost, link + std::to_string(a.node_id()) + " saw: the test cuts the link)");
  const Status b_saw(Errc::node_lost, link + std::to_string(b.node_id()) +
                                         " saw: the connection failed: Connection reset by peer)");
  const Status told = RuntimeAccess::impl(nodes[2]).global->lost();
  EXPECT_TRUE(told == a_saw || told == b_saw) << told.to_string();
  EXPECT_TRUE(has(waited, Errc::node_lost, {told.message()})) << waited.to_string();
  EXPECT_EQ(a.lost(), a_saw);
  // B hears of it by the reset or by the orchestrator's notice, whichever comes first, and C may
  // have heard before B did (a condition with a deadline, not a sleep that orders).
  for (const auto by = Clock::now() + 5s; b.lost().is_ok() && Clock::now() < by;) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(b.lost() == b_saw || b.lost() == a_saw) << b.lost().to_string();  // the notice may come first
  // Every later op of every node reports its node's first failure at once.
  const auto t0 = std::chrono::steady_clock::now();
  Status next = peers[2]->barrier();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_TRUE(has(next, Errc::node_lost, {"barrier #1: " + link})) << next.to_string();
}

} // namespace
} // namespace chorus
