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
// (node 1) is in the op already. C fails as soon as node 0's note comes, with A's error (naming B
// as C's own deadline would), not after its own 20 s; B, calling late, fails alike; the next op
// runs everywhere.
TEST(TimeoutsAcrossNodes, AnOpThatTimedOutAmongOneNodesPeersFailsAtOnceOnTheOtherNodes) {
  TwoNodes two;
  ASSERT_TRUE(two.join());
  OpOptions brief;
  brief.timeout = 300ms;
  Tensor x = Tensor::from(std::vector<float>{1, 2, 3}), y = Tensor::from(std::vector<float>{4, 5, 6});
  Tensor z = Tensor::from(std::vector<float>{7, 8, 9});
  const auto t0 = std::chrono::steady_clock::now();
  Work wc = two.c->all_reduce_async(z, ReduceOp::sum);
  const Status sa = two.a->all_reduce_async(x, ReduceOp::sum, brief).wait_for(10s);
  const std::string b_never = "all_reduce #0: rank " + std::to_string(two.b->rank()) + " never called within the op's timeout";
  ASSERT_TRUE(has(sa, Errc::timeout, {b_never})) << sa.to_string();
  const Status sc = wc.wait_for(20s);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s) << "C waited out its own timeout";
  EXPECT_EQ(sc, sa) << sc.to_string();
  EXPECT_EQ(two.b->all_reduce(y, ReduceOp::sum), sa) << "B, late on node 0";
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

} // namespace
} // namespace chorus
