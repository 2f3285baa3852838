// An op that times out on one node fails alike on the nodes whose peers call it later: the node
// that gave up tells the op's other nodes (frame gave_up), and a node that has not ended the op yet
// reports the same error, rather than completing it with the data the first node sent before it
// gave up (its peers would go on while the first node's failed). An op that times out among one
// node's own peers, before that node's part began, fails at once on the other nodes too, with
// that node's error (in the words of their own deadline): nothing will ever come from that node.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include "status_matchers.hpp"
#include "test_events.hpp"
#include "two_nodes.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;

// Node 1's note from node 0 that op #0 was given up (its peers time out first), within 10 s.
std::optional<Status> await_note(TwoNodes& two) {
  std::optional<Status> note;
  for (const auto until = Clock::now() + 10s; !(note = two.there().given_up(0, 0)) && Clock::now() < until;)
    std::this_thread::yield();
  return note;
}

// Every node goes on in step: the next op is the same one everywhere, and succeeds.
void expect_next_op_everywhere(TwoNodes& two, Tensor& x, Tensor& y, Tensor& z) {
  std::vector<Status> next(3);
  std::thread ta([&] { next[0] = two.a->all_reduce(x, ReduceOp::sum); });
  std::thread tb([&] { next[1] = two.b->all_reduce(y, ReduceOp::sum); });
  next[2] = two.c->all_reduce(z, ReduceOp::sum);
  ta.join();
  tb.join();
  for (const Status& s : next) EXPECT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(z.data_as<float>()[0], x.data_as<float>()[0]);
  EXPECT_EQ(x.data_as<float>()[0], y.data_as<float>()[0]);
}

// A and B (node 0) call an all-reduce with a 300 ms timeout; C (node 1) calls it only after they
// gave up and node 1 has their note. C fails at once with their error; the next op runs everywhere.
TEST(TimeoutsAcrossNodes, AnOpThatTimedOutOnOneNodeFailsAlikeOnANodeThatCallsItLate) {
  TwoNodes two;
  ASSERT_TRUE(two.join());
  OpOptions brief;
  brief.timeout = 300ms;
  Tensor x = Tensor::from(std::vector<float>{1, 2, 3}), y = Tensor::from(std::vector<float>{4, 5, 6});
  Work wa = two.a->all_reduce_async(x, ReduceOp::sum, brief);
  Work wb = two.b->all_reduce_async(y, ReduceOp::sum, brief);
  const Status sa = wa.wait_for(10s), sb = wb.wait_for(10s);
  ASSERT_TRUE(has(sa, Errc::timeout, {"all_reduce #0: ", "never called within the op's timeout"})) << sa.to_string();
  EXPECT_EQ(sb, sa);
  // Node 1 has the note before C calls (so C is late for sure).
  const std::optional<Status> note = await_note(two);
  ASSERT_TRUE(note.has_value()) << "node 1 never heard that node 0 gave up";
  EXPECT_EQ(*note, sa);
  Tensor z = Tensor::from(std::vector<float>{7, 8, 9});
  const auto t0 = std::chrono::steady_clock::now();
  const Status sc = two.c->all_reduce(z, ReduceOp::sum);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(sc, sa) << "C completed an op its other node gave up on";
  expect_next_op_everywhere(two, x, y, z);
}

// A (node 0) calls an all-reduce with a 300 ms timeout, which B, its node-mate, never calls; C
// (node 1) is in the op already (waiting for data). C fails as soon as node 0's note comes, with
// A's error (naming B as C's own deadline would), not after its own 20 s; B, calling late, fails
// alike; the next op runs everywhere.
TEST(TimeoutsAcrossNodes, AnOpThatTimedOutAmongOneNodesPeersFailsAtOnceOnTheOtherNodes) {
  TwoNodes two;
  ASSERT_TRUE(two.join());
  OpOptions brief;
  brief.timeout = 300ms;
  Tensor x = Tensor::from(std::vector<float>{1, 2, 3}), y = Tensor::from(std::vector<float>{4, 5, 6});
  Tensor z = Tensor::from(std::vector<float>{7, 8, 9});
  testing::EventCount c_waits;  // C is inside the op: its announcement left, it waits for data
  two.there().set_data_wait_hook([&](uint32_t, uint64_t) { c_waits.raise(); });
  const auto t0 = std::chrono::steady_clock::now();
  Work wc = two.c->all_reduce_async(z, ReduceOp::sum);
  ASSERT_TRUE(c_waits.wait_for(1));
  const Status sa = two.a->all_reduce_async(x, ReduceOp::sum, brief).wait_for(10s);
  const std::string b_never = "all_reduce #0: rank " + std::to_string(two.b->rank()) + " never called within the op's timeout";
  ASSERT_TRUE(has(sa, Errc::timeout, {b_never})) << sa.to_string();
  const Status sc = wc.wait_for(20s);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s) << "C waited out its own timeout";
  EXPECT_EQ(sc, sa) << sc.to_string();
  EXPECT_EQ(two.b->all_reduce(y, ReduceOp::sum), sa) << "B, late on node 0";
  two.there().set_data_wait_hook({});
  expect_next_op_everywhere(two, x, y, z);
}

// The same where C calls only after node 1 has the note: it fails at once.
TEST(TimeoutsAcrossNodes, AnOpThatTimedOutAmongOneNodesPeersFailsAtOnceOnANodeThatCallsItLate) {
  TwoNodes two;
  ASSERT_TRUE(two.join());
  OpOptions brief;
  brief.timeout = 300ms;
  Tensor x = Tensor::from(std::vector<float>{1, 2, 3}), z = Tensor::from(std::vector<float>{7, 8, 9});
  const Status sa = two.a->all_reduce_async(x, ReduceOp::sum, brief).wait_for(10s);
  ASSERT_EQ(sa.code(), Errc::timeout) << sa.to_string();
  const std::optional<Status> note = await_note(two);
  ASSERT_TRUE(note.has_value()) << "node 1 never heard that node 0 gave up";
  EXPECT_EQ(*note, sa);
  const auto t0 = std::chrono::steady_clock::now();
  const Status sc = two.c->all_reduce(z, ReduceOp::sum);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  EXPECT_EQ(sc, sa) << sc.to_string();
}

// Three nodes as Runtimes of this process: node 0 runs A and B, node 1 runs C, node 2 runs D.
struct ThreeNodes {
  testkit::Orchestrator orch = testkit::start_orchestrator({"--port", "0", "--nodes", "3", "--heartbeat-ms", "500"});
  testkit::ChildGuard daemon{orch.pid};
  Runtime nodes[3];
  Result<Peer> a = Status(Errc::internal, "not registered"), b = a, c = a, d = a;

  Config config(uint32_t peers) const { return in_process_node(orch, peers, 3); }
  ::testing::AssertionResult join() {
    if (orch.pid <= 0) return ::testing::AssertionFailure() << orch.error;
    std::thread tb([&] { b = nodes[0].register_peer(1, config(2)); });
    std::thread tc([&] { c = nodes[1].register_peer(0, config(1)); });
    std::thread td([&] { d = nodes[2].register_peer(0, config(1)); });
    a = nodes[0].register_peer(0, config(2));
    tb.join();
    tc.join();
    td.join();
    for (auto* p : {&a, &b, &c, &d})
      if (!p->is_ok()) return ::testing::AssertionFailure() << p->status().to_string();
    return ::testing::AssertionSuccess();
  }
};

// As above, but D (node 2) calls only after C returned: C's verdict does not wait for D's
// announcement (node 0's note decides it; no announcement could change it), so C fails at once,
// not at its 20 s deadline. D, calling late, fails alike at once; then the next op runs everywhere.
TEST(TimeoutsAcrossNodes, AnOpThatTimedOutAmongOneNodesPeersDoesNotWaitForAThirdNodeToCall) {
  ThreeNodes three;
  ASSERT_TRUE(three.join());
  OpOptions brief;
  brief.timeout = 300ms;
  std::vector<Tensor> t;
  for (float v : {1.f, 2.f, 3.f, 4.f}) t.push_back(Tensor::from(std::vector<float>{v, v}));
  const auto t0 = std::chrono::steady_clock::now();
  Work wc = three.c->all_reduce_async(t[2], ReduceOp::sum);
  const Status sa = three.a->all_reduce_async(t[0], ReduceOp::sum, brief).wait_for(10s);
  const std::string b_never = "all_reduce #0: rank " + std::to_string(three.b->rank()) + " never called within the op's timeout";
  ASSERT_TRUE(has(sa, Errc::timeout, {b_never})) << sa.to_string();
  const Status sc = wc.wait_for(20s);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s) << "C waited for D's announcement";
  EXPECT_EQ(sc, sa) << sc.to_string();
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_EQ(three.d->all_reduce(t[3], ReduceOp::sum), sa) << "D, late on node 2";
  EXPECT_LT(std::chrono::steady_clock::now() - t1, 10s) << "D waited out its own timeout";
  EXPECT_EQ(three.b->all_reduce(t[1], ReduceOp::sum), sa) << "B, late on node 0";
  std::vector<Status> next(4);
  std::vector<std::thread> others;
  others.emplace_back([&] { next[1] = three.b->all_reduce(t[1], ReduceOp::sum); });
  others.emplace_back([&] { next[2] = three.c->all_reduce(t[2], ReduceOp::sum); });
  others.emplace_back([&] { next[3] = three.d->all_reduce(t[3], ReduceOp::sum); });
  next[0] = three.a->all_reduce(t[0], ReduceOp::sum);
  for (auto& th : others) th.join();
  for (const Status& s : next) EXPECT_TRUE(s.is_ok()) << s.to_string();
  for (const Tensor& x : t) EXPECT_EQ(x.data_as<float>()[0], 10.f);
}

} // namespace
} // namespace chorus
