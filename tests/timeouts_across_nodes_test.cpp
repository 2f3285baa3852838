// An op that times out on one node fails alike on the nodes whose peers call it later: the node
// that gave up tells the op's other nodes (frame gave_up), and a node that has not ended the op yet
// reports the same error, rather than completing it with the data the first node sent before it
// gave up (its peers would go on while the first node's failed). An op that times out among one
// node's own peers, before that node's part began, fails at once on the other nodes too, with
// that node's error (in the words of their own deadline): nothing will ever come from that node.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <tuple>
#include <optional>
#include <thread>
#include <vector>

#include "status_matchers.hpp"
#include "test_events.hpp"
#include "two_nodes.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;

// The note of another node that op #0 was given up there (its peers timed out), as `g`'s node
// has it within 10 s.
std::optional<Status> await_note(GlobalClient& g) {
  std::optional<Status> note;
  for (const auto until = Clock::now() + 10s; !(note = g.given_up(0, 0)) && Clock::now() < until;)
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
  const std::optional<Status> note = await_note(two.there());
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
  const std::optional<Status> note = await_note(two.there());
  ASSERT_TRUE(note.has_value()) << "node 1 never heard that node 0 gave up";
  EXPECT_EQ(*note, sa);
  const auto t0 = std::chrono::steady_clock::now();
  const Status sc = two.c->all_reduce(z, ReduceOp::sum);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  EXPECT_EQ(sc, sa) << sc.to_string();
}

// A and B (node 0) give their all-reduce no timeout of their own (the Config's 20 s) and wait in
// it for node 1's data; then C (node 1) calls it with 1 s of its own, and stops inside it as it
// is about to wait for data (the data-wait hook holds C until node 0's peers are done), so node
// 0's peers wait for data that does not come. C's bound, which its node's announcement carried
// to every node of the op, ends their waits (counted from when every node had called), though
// they began waiting under their own 20 s. C, let go, is past the same bound and fails too; no
// link was cut for it: the next op runs everywhere.
TEST(TimeoutsAcrossNodes, AnOpsOwnTimeoutGivenOnOneNodeBoundsItsTransfersOnEveryNode) {
  TwoNodes two;
  ASSERT_TRUE(two.join());
  OpOptions brief;
  brief.timeout = 1000ms;
  constexpr std::size_t kElements = 1 << 18;  // steps each way: node 0 waits on node 1's later ones
  Tensor x = Tensor::from(std::vector<float>(kElements, 1)), y = Tensor::from(std::vector<float>(kElements, 2));
  Tensor z = Tensor::from(std::vector<float>(kElements, 3));
  testing::EventCount here_waits, c_waits, let_go;
  two.here().set_data_wait_hook([&](uint32_t, uint64_t seq) {
    if (seq == 0) here_waits.raise();
  });
  two.there().set_data_wait_hook([&](uint32_t, uint64_t seq) {
    if (seq != 0) return;
    c_waits.raise();
    (void)let_go.wait_for(1, 30s);
  });
  Work wa = two.a->all_reduce_async(x, ReduceOp::sum);
  Work wb = two.b->all_reduce_async(y, ReduceOp::sum);
  ASSERT_TRUE(here_waits.wait_for(1)) << "node 0 never waited for node 1's data";
  const auto t0 = std::chrono::steady_clock::now();
  Work wc = two.c->all_reduce_async(z, ReduceOp::sum, brief);
  const Status sa = wa.wait_for(30s), sb = wb.wait_for(30s);
  const auto took = std::chrono::steady_clock::now() - t0;
  const bool held = c_waits.count() > 0;
  let_go.raise();
  const Status sc = wc.wait_for(30s);
  two.here().set_data_wait_hook({});
  two.there().set_data_wait_hook({});
  ASSERT_TRUE(held) << "C never waited for data in the op";
  EXPECT_LT(took, 10s) << "node 0 waited out its own 20 s";
  EXPECT_TRUE(has(sa, Errc::timeout, {"all_reduce #0: node " + std::to_string(two.there().node_id()),
                                      "within the op's timeout"}))
      << sa.to_string();
  EXPECT_EQ(sb.code(), Errc::timeout) << sb.to_string();
  EXPECT_EQ(sc.code(), Errc::timeout) << sc.to_string();
  expect_next_op_everywhere(two, x, y, z);
}

// Nodes as Runtimes of this process, joined through the daemon (20 s timeouts): runtime i runs
// per_node[i] peers, and p lists them all, runtime 0's first. Node ids go by the order of
// joining: any runtime may be node 0, so ranks are asked of the peers.
struct Nodes {
  std::vector<uint32_t> per_node;
  testkit::Orchestrator orch;
  testkit::ChildGuard daemon;
  std::unique_ptr<Runtime[]> rts;
  std::vector<Result<Peer>> p;
  std::vector<std::chrono::milliseconds> timeout;  // runtime i's Config::timeout, where given before join()

  explicit Nodes(std::vector<uint32_t> peers)
      : per_node(std::move(peers)),
        orch(testkit::start_orchestrator({"--port", "0", "--nodes", std::to_string(per_node.size()), "--heartbeat-ms", "500"})),
        daemon{orch.pid},
        rts(new Runtime[per_node.size()]) {}
  ::testing::AssertionResult join() {
    if (orch.pid <= 0) return ::testing::AssertionFailure() << orch.error;
    for (uint32_t n : per_node)
      for (uint32_t j = 0; j < n; ++j) p.emplace_back(Status(Errc::internal, "not registered"));
    std::vector<std::thread> joining;  // registration blocks until every node joined
    for (std::size_t i = 0, k = 0; i < per_node.size(); ++i)
      for (uint32_t j = 0; j < per_node[i]; ++j, ++k)
        joining.emplace_back([this, i, j, k] {
          Config cfg = in_process_node(orch, per_node[i], static_cast<uint32_t>(per_node.size()));
          if (i < timeout.size()) cfg.timeout = timeout[i];
          p[k] = rts[i].register_peer(j, cfg);
        });
    for (auto& t : joining) t.join();
    for (auto& r : p)
      if (!r.is_ok()) return ::testing::AssertionFailure() << r.status().to_string();
    return ::testing::AssertionSuccess();
  }
  GlobalClient& global(std::size_t i) { return *RuntimeAccess::impl(rts[i]).global; }
  // Every peer calls the next all-reduce at once (t[k] is p[k]'s): it succeeds everywhere, with
  // one sum.
  void expect_next_op_everywhere(std::vector<Tensor>& t) {
    std::vector<Status> next(p.size());
    std::vector<std::thread> calls;
    for (std::size_t k = 0; k < p.size(); ++k) calls.emplace_back([&, k] { next[k] = p[k]->all_reduce(t[k], ReduceOp::sum); });
    for (auto& c : calls) c.join();
    for (const Status& s : next) EXPECT_TRUE(s.is_ok()) << s.to_string();
    for (const Tensor& x : t) EXPECT_EQ(x.data_as<float>()[0], t[0].data_as<float>()[0]);
  }
};

// Whether `g`'s node drops op #0 from its table within 10 s (a note's receiver drops it once its
// local server, which answers the peers first, has failed it).
bool drops_op(GlobalClient& g) {
  for (const auto until = Clock::now() + 10s; g.holds(0, 0) && Clock::now() < until;) std::this_thread::yield();
  return !g.holds(0, 0);
}

std::vector<Tensor> inputs(std::size_t n) {
  std::vector<Tensor> t;
  for (std::size_t k = 0; k < n; ++k) t.push_back(Tensor::from(std::vector<float>{float(k + 1), float(k + 1)}));
  return t;
}

std::string never_called(Result<Peer>& straggler) {
  return "all_reduce #0: rank " + std::to_string(straggler->rank()) + " never called within the op's timeout";
}

// As above, with a third node, D's, which calls only after C returned: C's verdict does not wait
// for D's announcement (node 0's note decides it; no announcement could change it), so C fails at
// once, not at its 20 s deadline. D, calling late, fails alike at once; the next op runs everywhere.
TEST(TimeoutsAcrossNodes, AnOpThatTimedOutAmongOneNodesPeersDoesNotWaitForAThirdNodeToCall) {
  Nodes nodes({2, 1, 1});
  ASSERT_TRUE(nodes.join());
  auto [a, b, c, d] = std::tie(nodes.p[0], nodes.p[1], nodes.p[2], nodes.p[3]);
  OpOptions brief;
  brief.timeout = 300ms;
  std::vector<Tensor> t = inputs(4);
  const auto t0 = std::chrono::steady_clock::now();
  Work wc = c->all_reduce_async(t[2], ReduceOp::sum);
  const Status sa = a->all_reduce_async(t[0], ReduceOp::sum, brief).wait_for(10s);
  ASSERT_TRUE(has(sa, Errc::timeout, {never_called(b)})) << sa.to_string();
  const Status sc = wc.wait_for(20s);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s) << "C waited for D's announcement";
  EXPECT_EQ(sc, sa) << sc.to_string();
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_EQ(d->all_reduce(t[3], ReduceOp::sum), sa) << "D, late on node 2";
  EXPECT_LT(std::chrono::steady_clock::now() - t1, 10s) << "D waited out its own timeout";
  EXPECT_EQ(b->all_reduce(t[1], ReduceOp::sum), sa) << "B, late on node 0";
  nodes.expect_next_op_everywhere(t);
}

// Three nodes of one peer each, ranks 0, 1 and 2 around the op's ring. Rank 0 and rank 2 call an
// all-reduce with no timeout of their own (the Config's 20 s); rank 2 stops inside it as it is
// about to wait for data (the data-wait hook holds it), so rank 0 waits, already, for a step of
// rank 2's that does not come. Then rank 1 calls with 1 s of its own: once rank 0 has its
// announcement (every node called), the bound comes closer and rank 0's wait, begun under the
// old one, ends by it (NetOp::wake_all_waits), not at half its 20 s or after them.
TEST(TimeoutsAcrossNodes, AWaitBegunBeforeAnotherNodesShorterBoundCameEndsByIt) {
  Nodes nodes({1, 1, 1});
  ASSERT_TRUE(nodes.join());
  std::size_t of_rank[3];
  for (std::size_t k = 0; k < 3; ++k) of_rank[nodes.p[k]->rank()] = k;
  const std::size_t waits = of_rank[0], bound = of_rank[1], held = of_rank[2];
  OpOptions brief;
  brief.timeout = 1000ms;
  std::vector<Tensor> t;
  for (std::size_t k = 0; k < 3; ++k) t.push_back(Tensor::from(std::vector<float>(1 << 18, float(k + 1))));
  testing::EventCount stopped, let_go, second_wait;
  nodes.global(held).set_data_wait_hook([&](uint32_t, uint64_t seq) {
    if (seq != 0) return;
    stopped.raise();
    (void)let_go.wait_for(1, 30s);
  });
  nodes.global(waits).set_data_wait_hook([&](uint32_t, uint64_t seq) {
    if (seq == 0) second_wait.raise();
  });
  Work w_held = nodes.p[held]->all_reduce_async(t[held], ReduceOp::sum);
  Work w_waits = nodes.p[waits]->all_reduce_async(t[waits], ReduceOp::sum);
  ASSERT_TRUE(stopped.wait_for(1)) << "rank 2 never waited for data";
  ASSERT_TRUE(second_wait.wait_for(2)) << "rank 0 never waited for a second step";
  const auto t0 = std::chrono::steady_clock::now();
  Work w_bound = nodes.p[bound]->all_reduce_async(t[bound], ReduceOp::sum, brief);
  const Status s_waits = w_waits.wait_for(30s);
  const auto took = std::chrono::steady_clock::now() - t0;
  let_go.raise();
  const Status s_bound = w_bound.wait_for(30s), s_held = w_held.wait_for(30s);
  nodes.global(held).set_data_wait_hook({});
  nodes.global(waits).set_data_wait_hook({});
  EXPECT_LT(took, 5s) << "rank 0's wait kept its own bound";
  EXPECT_TRUE(has(s_waits, Errc::timeout, {"all_reduce #0: ", "within the op's timeout"})) << s_waits.to_string();
  EXPECT_EQ(s_bound.code(), Errc::timeout) << s_bound.to_string();
  EXPECT_EQ(s_held.code(), Errc::timeout) << s_held.to_string();
  nodes.expect_next_op_everywhere(t);
}

// A Config's timeout stays its process's own: three nodes of one peer each around the op's ring,
// X's runtime with 5 s, Y's and Z's with 1 s, and no peer gives OpOptions::timeout. X stops
// inside the op as it is about to wait for data (the data-wait hook holds it), so Y and Z wait for
// steps that need X's and time out by their 1 s. X, let go then, waits for a step that needs
// theirs, and is not held to their 1 s: it waits out its own 5 s (from its launch) and fails.
TEST(TimeoutsAcrossNodes, AConfigsTimeoutBoundsOnlyItsOwnProcessesTransfers) {
  Nodes nodes({1, 1, 1});
  nodes.timeout = {5000ms, 1000ms, 1000ms};
  ASSERT_TRUE(nodes.join());
  std::vector<Tensor> t;
  for (std::size_t k = 0; k < 3; ++k) t.push_back(Tensor::from(std::vector<float>(1 << 18, float(k + 1))));
  testing::EventCount held, let_go;
  nodes.global(0).set_data_wait_hook([&](uint32_t, uint64_t seq) {
    if (seq != 0) return;
    held.raise();
    (void)let_go.wait_for(1, 30s);
  });
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Work> w;
  for (std::size_t k = 0; k < 3; ++k) w.push_back(nodes.p[k]->all_reduce_async(t[k], ReduceOp::sum));
  const Status sy = w[1].wait_for(30s), sz = w[2].wait_for(30s);
  const auto yz_took = std::chrono::steady_clock::now() - t0;
  const bool was_held = held.count() > 0;
  let_go.raise();
  const Status sx = w[0].wait_for(30s);
  const auto x_took = std::chrono::steady_clock::now() - t0;
  nodes.global(0).set_data_wait_hook({});
  ASSERT_TRUE(was_held) << "X never waited for data in the op";
  EXPECT_EQ(sy.code(), Errc::timeout) << sy.to_string();
  EXPECT_EQ(sz.code(), Errc::timeout) << sz.to_string();
  EXPECT_LT(yz_took, 4s) << "Y and Z did not keep their own 1 s";
  EXPECT_EQ(sx.code(), Errc::timeout) << sx.to_string();
  EXPECT_GE(x_took, 4500ms) << "X was held to Y's Config: " << sx.to_string() << " / " << sy.to_string();
  nodes.expect_next_op_everywhere(t);
}

// Two nodes of two peers, A and B (p[0], p[1]) on one, C and D (p[2], p[3]) on the other; C
// calls op #0 with 300 ms, and D does not: node 1's local phase times out, and its note reaches
// node 0. Then B and D, late, fail alike, neither node's table keeps the op, and the next op runs.
class NeverLaunchedNote : public ::testing::Test {
 protected:
  Nodes nodes{{2, 2}};
  std::vector<Tensor> t = inputs(4);

  void SetUp() override { ASSERT_TRUE(nodes.join()); }
  Result<Peer>& p(std::size_t k) { return nodes.p[k]; }
  Status c_times_out() {
    OpOptions brief;
    brief.timeout = 300ms;
    const Status sc = p(2)->all_reduce_async(t[2], ReduceOp::sum, brief).wait_for(10s);
    EXPECT_TRUE(has(sc, Errc::timeout, {never_called(p(3))})) << sc.to_string();
    return sc;
  }
  void expect_the_rest(const Status& sc) {
    EXPECT_EQ(p(1)->all_reduce(t[1], ReduceOp::sum), sc) << "B, late on node 0";
    EXPECT_EQ(p(3)->all_reduce(t[3], ReduceOp::sum), sc) << "D, late on node 1";
    EXPECT_TRUE(drops_op(nodes.global(0)));
    EXPECT_TRUE(drops_op(nodes.global(1)));
    nodes.expect_next_op_everywhere(t);
  }
};

// A, which called with 20 s and waits for B, its node-mate, fails as soon as node 1's note comes,
// with C's error (naming D), not at its own deadline naming B.
TEST_F(NeverLaunchedNote, EndsTheWaitForThisNodesOwnPeers) {
  testing::EventCount entered;  // A's call reached node 0's local server
  testing::count_server_entries(nodes.rts[0], entered);
  const auto t0 = std::chrono::steady_clock::now();
  Work wa = p(0)->all_reduce_async(t[0], ReduceOp::sum);
  ASSERT_TRUE(entered.wait_for(1));
  const Status sc = c_times_out();
  const Status sa = wa.wait_for(20s);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s) << "A waited out its own timeout";
  EXPECT_EQ(sa, sc) << sa.to_string();
  expect_the_rest(sc);
}

// No peer of node 0 has called when the note comes: the first to call fails at once with C's
// error, and its node-mate too.
TEST_F(NeverLaunchedNote, FailsTheOpHereAtItsFirstCall) {
  const Status sc = c_times_out();
  // Node 0's local server keeps the note for its first call (it comes after the global client's).
  LocalServerCore& core0 = *RuntimeAccess::impl(nodes.rts[0]).core;
  for (const auto until = Clock::now() + 10s; !core0.keeps_note(0, 0) && Clock::now() < until;) std::this_thread::yield();
  ASSERT_TRUE(core0.keeps_note(0, 0)) << "node 0 never heard that node 1 gave up";
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(p(0)->all_reduce(t[0], ReduceOp::sum), sc) << "A, first on node 0";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s) << "A waited for B";
  expect_the_rest(sc);
}

} // namespace
} // namespace chorus
