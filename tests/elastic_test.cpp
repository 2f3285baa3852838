// Elastic membership end to end, with nodes as Runtimes of this process joined through the
// orchestrator daemon (one peer each; node ids by the order of joining, so tests go by rank):
//  * a node leaves; the others shrink and all-reduce among themselves, with values checked, and
//    their old handles fail with revoked;
//  * a shrink that excludes a live node: the excluded node is told so when it calls;
//  * the grow of an elastic job by a newcomer, and by three at once: every member and newcomer
//    get the grown world, ranks kept, and all-reduce in it; a newcomer with another config is
//    refused alone;
//  * a group's shrink: the group of its members still in the world's next epoch, in their old
//    order, with or without the world shrunk first at that peer, and excluding live members;
//  * a revoke ends an op waiting at another node at once, and every later op, with revoked; a
//    revoke racing with the ops' completion ends each one way or the other; the members then shrink;
//  * node processes (chorus-test-node), one SIGKILLed or frozen (SIGSTOP) mid-op, first, middle
//    or last by rank, with one and two peers per node: the survivors shrink and run checked
//    all-reduces.
// The orchestrator's rules alone: orchestrator_epochs_cases.cpp.
#include <gtest/gtest.h>

#include <signal.h>

#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include <chorus/runtime.hpp>
#include "actors/global_client/global_client.hpp"
#include "mesh/data_mesh.hpp"
#include "runtime/runtime_impl.hpp"
#include "multi_node_fixture.hpp"
#include "status_matchers.hpp"
#include "test_events.hpp"
#include "testkit/process.hpp"
#include "transport/door_passage.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;

struct Job {
  explicit Job(uint32_t n, bool elastic = false)
      : orch(testkit::start_orchestrator({"--port", "0", "--nodes", std::to_string(n), "--heartbeat-ms", "500"})),
        daemon{orch.pid}, elastic(elastic) {
    nodes.resize(n);
    for (auto& r : nodes) r = std::make_unique<Runtime>();
  }
  Config config(uint32_t n) const {
    Config c;
    c.num_devices = 1;
    c.num_nodes = n;
    c.orchestrator_address = "127.0.0.1:" + std::to_string(orch.port);
    c.node_address = "127.0.0.1";
    c.timeout = 20s;
    c.elastic = elastic;
    return c;
  }
  // Registers every node at once; peers[i] is runtime i's peer (any rank).
  ::testing::AssertionResult join() {
    if (orch.pid <= 0) return ::testing::AssertionFailure() << orch.error;
    peers.assign(nodes.size(), Status(Errc::internal, "not registered"));
    std::vector<std::thread> t;
    for (std::size_t i = 0; i < nodes.size(); ++i)
      t.emplace_back([&, i] { peers[i] = nodes[i]->register_peer(0, config(static_cast<uint32_t>(nodes.size()))); });
    for (auto& th : t) th.join();
    for (auto& p : peers)
      if (!p) return ::testing::AssertionFailure() << p.status().to_string();
    return ::testing::AssertionSuccess();
  }
  // The runtime whose peer has world rank r.
  std::size_t of_rank(uint32_t r) const {
    for (std::size_t i = 0; i < peers.size(); ++i)
      if (peers[i] && peers[i].value().rank() == r) return i;
    return peers.size();
  }
  testkit::Orchestrator orch;
  testkit::ChildGuard daemon;
  bool elastic;
  std::vector<std::unique_ptr<Runtime>> nodes;
  std::vector<Result<Peer>> peers;
};

// Each of `world` all-reduces {rank + 1, 10 * (rank + 1)} at once; every one must get the sums.
void expect_all_reduce(std::vector<Peer*> world) {
  const auto n = static_cast<float>(world.size());
  std::vector<Status> got(world.size());
  std::vector<Tensor> t(world.size());
  std::vector<std::thread> th;
  for (std::size_t i = 0; i < world.size(); ++i) {
    const auto v = static_cast<float>(world[i]->rank() + 1);
    t[i] = Tensor::from(std::vector<float>{v, 10 * v});
    th.emplace_back([&, i] { got[i] = world[i]->all_reduce(t[i], ReduceOp::sum); });
  }
  for (auto& x : th) x.join();
  const float sum = n * (n + 1) / 2;
  for (std::size_t i = 0; i < world.size(); ++i) {
    ASSERT_TRUE(got[i].is_ok()) << got[i].to_string();
    EXPECT_EQ(t[i].data_as<float>()[0], sum) << "rank " << world[i]->rank();
    EXPECT_EQ(t[i].data_as<float>()[1], 10 * sum) << "rank " << world[i]->rank();
  }
}

// Runs shrink (or grow) on every peer of `callers` at once.
std::vector<Result<Peer>> all_at_once(const std::vector<Peer*>& callers, bool grow, std::vector<uint32_t> exclude = {}) {
  std::vector<Result<Peer>> out(callers.size(), Status(Errc::internal, "not called"));
  std::vector<std::thread> th;
  for (std::size_t i = 0; i < callers.size(); ++i)
    th.emplace_back([&, i] { out[i] = grow ? callers[i]->grow() : callers[i]->shrink(exclude); });
  for (auto& x : th) x.join();
  return out;
}

TEST(Elastic, SurvivorsShrinkAfterANodeLeavesAndGoOn) {
  Job job(3);
  ASSERT_TRUE(job.join());
  const std::size_t gone = job.of_rank(1), a = job.of_rank(0), b = job.of_rank(2);
  job.nodes[gone].reset();  // says goodbye: its rank is no member any more
  const uint64_t passages = DoorPassage::opened();
  auto data_port = [](const RuntimeImpl& rt) {
    const TopologyData& t = rt.global->topology();
    return t.nodes[t.node_id].data_address;
  };
  const std::string port_a = data_port(RuntimeAccess::impl(*job.nodes[a]));
  const uint64_t links = mesh_links_made();
  auto next = all_at_once({&*job.peers[a], &*job.peers[b]}, false);
  ASSERT_TRUE(next[0].is_ok()) << next[0].status().to_string();
  ASSERT_TRUE(next[1].is_ok()) << next[1].status().to_string();
  // Each survivor joined the new epoch over the link its node had: no door passed again; it
  // kept its data connection to the other survivor rather than making one; and it listens on
  // the data port it had, rather than binding another.
  EXPECT_EQ(DoorPassage::opened(), passages);
  EXPECT_EQ(mesh_links_made(), links) << "the survivors' link was made again";
  EXPECT_EQ(data_port(*RuntimeAccess::impl(*job.nodes[a]).next), port_a);
  // The survivors in their old order: old rank 0 is rank 0, old rank 2 is rank 1.
  EXPECT_EQ(next[0]->rank(), 0u);
  EXPECT_EQ(next[1]->rank(), 1u);
  EXPECT_EQ(next[0]->size(), 2u);
  EXPECT_EQ(next[0]->epoch(), 1u);
  EXPECT_EQ(job.peers[a]->epoch(), 0u);
  expect_all_reduce({&*next[0], &*next[1]});
  // The old world is revoked; a second shrink of it returns the same new world, and a grow of
  // it is told that the world left by a shrink.
  Tensor x = Tensor::from(std::vector<float>{1});
  EXPECT_TRUE(has(job.peers[a]->all_reduce(x, ReduceOp::sum), Errc::revoked, {"next epoch by a shrink"}));
  auto again = job.peers[a]->shrink();
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_EQ(again->epoch(), 1u);
  EXPECT_EQ(again->members(), next[0]->members());
  EXPECT_TRUE(has(job.peers[a]->grow().status(), Errc::op_mismatch, {"by a shrink"}));
  expect_all_reduce({&*again, &*next[1]});
  // A second shrink, of the shrunk world, after the next loss: one node alone goes on.
  job.nodes[b].reset();
  auto last = next[0]->shrink();
  ASSERT_TRUE(last.is_ok()) << last.status().to_string();
  EXPECT_EQ(last->size(), 1u);
  EXPECT_EQ(last->epoch(), 2u);
  expect_all_reduce({&*last});
}

// A link between two survivors that ended on one side only before the shrink (a cut whose reset
// never arrived): that side's rejoin says it cannot keep it, and both sides remake the pair,
// rather than one keeping it while the other connects anew (which failed the shrink at the data
// port's gate or at the join's limit). Either side's end: the lower node's, then the higher's.
TEST(Elastic, ALinkEndedOnOneSideOnlyIsRemadeByTheShrink) {
  for (bool lower : {true, false}) {
    SCOPED_TRACE(lower ? "the lower node's end ended" : "the higher node's end ended");
    Job job(3);
    ASSERT_TRUE(job.join());
    const std::size_t gone = job.of_rank(1), a = job.of_rank(0), b = job.of_rank(2);
    job.nodes[gone].reset();
    GlobalClient& ga = *RuntimeAccess::impl(*job.nodes[a]).global;
    GlobalClient& gb = *RuntimeAccess::impl(*job.nodes[b]).global;
    const uint32_t na = ga.topology().node_id, nb = gb.topology().node_id;
    ASSERT_LT(na, nb);
    Connection* end = lower ? ga.connection(nb) : gb.connection(na);
    ASSERT_NE(end, nullptr);
    end->drop_silently();
    EXPECT_FALSE((lower ? gb.connection(na) : ga.connection(nb))->ended()) << "the other side heard of it";
    const uint64_t links = mesh_links_made();
    auto next = all_at_once({&*job.peers[a], &*job.peers[b]}, false);
    ASSERT_TRUE(next[0].is_ok()) << next[0].status().to_string();
    ASSERT_TRUE(next[1].is_ok()) << next[1].status().to_string();
    EXPECT_EQ(mesh_links_made(), links + 2) << "the pair was not remade on both sides";
    expect_all_reduce({&*next[0], &*next[1]});
  }
}

TEST(Elastic, AShrinkMayExcludeALiveNodeWhichIsToldSo) {
  Job job(3);
  ASSERT_TRUE(job.join());
  const std::size_t a = job.of_rank(0), b = job.of_rank(1), out = job.of_rank(2);
  // A rank of the caller's own node cannot be excluded; a rank out of the world neither.
  EXPECT_TRUE(has(job.peers[a]->shrink({0}).status(), Errc::invalid_argument, {"a peer of the caller's own node"}));
  EXPECT_TRUE(has(job.peers[a]->shrink({7}).status(), Errc::invalid_argument, {"rank 7 is not one of the world's 3"}));
  auto next = all_at_once({&*job.peers[a], &*job.peers[b]}, false, {2});
  ASSERT_TRUE(next[0].is_ok()) << next[0].status().to_string();
  ASSERT_TRUE(next[1].is_ok()) << next[1].status().to_string();
  EXPECT_EQ(next[0]->size(), 2u);
  expect_all_reduce({&*next[0], &*next[1]});
  auto told = job.peers[out]->shrink();
  EXPECT_TRUE(has(told.status(), Errc::revoked, {"the shrink of collective", "this node was excluded by the shrink"}));
}

// A group shrinks within the world's next epoch: its members still there, in their old order,
// whether the world was shrunk first at that peer or not (then the group's shrink does it).
TEST(Elastic, AGroupShrinksToItsSurvivorsInTheirOldOrder) {
  Job job(4);
  ASSERT_TRUE(job.join());
  std::vector<Peer> world;
  for (uint32_t r = 0; r < 4; ++r) world.push_back(*job.peers[job.of_rank(r)]);
  // The group {3, 1, 0}: group ranks 0, 1, 2 are world ranks 3, 1, 0; rank 2 is out of it.
  std::vector<Result<Peer>> group(4, Status(Errc::internal, "not made"));
  {
    std::vector<std::thread> th;
    for (uint32_t r : {0u, 1u, 3u}) th.emplace_back([&, r] { group[r] = world[r].new_group({3, 1, 0}); });
    for (auto& t : th) t.join();
  }
  for (uint32_t r : {0u, 1u, 3u}) ASSERT_TRUE(group[r].is_ok()) << group[r].status().to_string();
  EXPECT_TRUE(has(group[0]->grow().status(), Errc::invalid_argument, {"grow runs on the world's handle"}));
  EXPECT_TRUE(has(group[0]->shrink({3}).status(), Errc::invalid_argument, {"rank 3 is not one of group"}));
  job.nodes[job.of_rank(1)].reset();  // world rank 1, group rank 1, leaves
  // Rank 3 shrinks the world first, then its group; rank 0 shrinks its group alone; rank 2 the world.
  std::vector<Result<Peer>> next_world(4, Status(Errc::internal, "not shrunk")), next_group(4, Status(Errc::internal, "not shrunk"));
  {
    std::vector<std::thread> th;
    th.emplace_back([&] { next_group[0] = group[0]->shrink(); });
    th.emplace_back([&] { next_world[2] = world[2].shrink(); });
    th.emplace_back([&] {
      next_world[3] = world[3].shrink();
      if (next_world[3]) next_group[3] = group[3]->shrink();
    });
    for (auto& t : th) t.join();
  }
  for (uint32_t r : {2u, 3u}) ASSERT_TRUE(next_world[r].is_ok()) << next_world[r].status().to_string();
  for (uint32_t r : {0u, 3u}) ASSERT_TRUE(next_group[r].is_ok()) << next_group[r].status().to_string();
  // The world of three: old ranks 0, 2, 3 are 0, 1, 2; the group of two: old 3 then old 0.
  EXPECT_EQ(next_world[3]->size(), 3u);
  EXPECT_EQ(next_group[3]->members(), (std::vector<PeerId>{2, 0}));
  EXPECT_EQ(next_group[0]->members(), (std::vector<PeerId>{2, 0}));
  EXPECT_EQ(next_group[3]->rank(), 0u);
  EXPECT_EQ(next_group[0]->rank(), 1u);
  EXPECT_EQ(next_group[0]->epoch(), 1u);
  expect_all_reduce({&*next_group[3], &*next_group[0]});
  // Rank 0's world in that epoch is what its own world.shrink() gives now.
  auto w0 = world[0].shrink();
  ASSERT_TRUE(w0.is_ok()) << w0.status().to_string();
  EXPECT_EQ(w0->epoch(), 1u);
  expect_all_reduce({&*w0, &*next_world[2], &*next_world[3]});
  // The old group's ops end with revoked.
  Tensor x = Tensor::from(std::vector<float>{1});
  EXPECT_TRUE(has(group[0]->all_reduce(x, ReduceOp::sum), Errc::revoked, {}));
}

// A group's shrink may leave out live members (ranks of the group): they are told so, and stay
// in the world's next epoch.
TEST(Elastic, AGroupShrinkMayExcludeLiveMembers) {
  Job job(3);
  ASSERT_TRUE(job.join());
  std::vector<Peer> world;
  for (uint32_t r = 0; r < 3; ++r) world.push_back(*job.peers[job.of_rank(r)]);
  std::vector<Result<Peer>> group(3, Status(Errc::internal, "not made")), next(3, Status(Errc::internal, "not shrunk"));
  {
    std::vector<std::thread> th;
    for (uint32_t r = 0; r < 3; ++r) th.emplace_back([&, r] { group[r] = world[r].split(0, static_cast<int>(2 - r)); });
    for (auto& t : th) t.join();
  }
  for (auto& g : group) ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(group[0]->rank(), 2u);  // keyed in reverse
  {
    std::vector<std::thread> th;
    for (uint32_t r = 0; r < 3; ++r) th.emplace_back([&, r] { next[r] = group[r]->shrink({1}); });  // group rank 1: world 1
    for (auto& t : th) t.join();
  }
  EXPECT_TRUE(has(next[1].status(), Errc::revoked, {"rank 1 (this peer) is excluded"})) << next[1].status().to_string();
  for (uint32_t r : {0u, 2u}) ASSERT_TRUE(next[r].is_ok()) << next[r].status().to_string();
  EXPECT_EQ(next[0]->members(), (std::vector<PeerId>{2, 0}));
  expect_all_reduce({&*next[0], &*next[2]});
  // Nobody was lost: the world's next epoch keeps all three, rank 1 with them.
  std::vector<Result<Peer>> w = all_at_once({&world[0], &world[1], &world[2]}, false);
  for (auto& p : w) ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(w[1]->size(), 3u);
  EXPECT_EQ(w[1]->epoch(), 1u);
  expect_all_reduce({&*w[0], &*w[1], &*w[2]});
}

TEST(Elastic, GrowTakesInANewcomerAndRefusesAStrangerAlone) {
  Job job(2, true);
  ASSERT_TRUE(job.join());
  // A newcomer with another config is refused at once, and the job goes on.
  Runtime stranger;
  Config wrong = job.config(2);
  wrong.auto_tree_arity = 5;
  wrong.newcomer = true;
  auto refused = stranger.register_peer(0, wrong);
  EXPECT_TRUE(has(refused.status(), Errc::config_mismatch, {"newcomer", "auto_tree_arity"}));
  // The newcomer registers and waits for the members' grow.
  Runtime newcomer;
  Result<Peer> joined = Status(Errc::internal, "not registered");
  Config mine = job.config(2);
  mine.newcomer = true;
  std::thread waits([&] { joined = newcomer.register_peer(0, mine); });
  const std::size_t a = job.of_rank(0), b = job.of_rank(1);
  // Every member is told of the newcomer (and the refused one was never one).
  for (std::size_t i : {a, b})
    ASSERT_TRUE(RuntimeAccess::impl(*job.nodes[i]).global->wait_newcomers(1, Clock::now() + 10s))
        << "member " << i << " was never told of the newcomer";
  EXPECT_EQ(job.peers[a]->newcomers(), 1u);
  const uint64_t passages = DoorPassage::opened();  // the newcomer's is among them: it waits
  const uint64_t links = mesh_links_made();
  auto grown = all_at_once({&*job.peers[a], &*job.peers[b]}, true);
  ASSERT_TRUE(grown[0].is_ok()) << grown[0].status().to_string();
  ASSERT_TRUE(grown[1].is_ok()) << grown[1].status().to_string();
  waits.join();
  ASSERT_TRUE(joined.is_ok()) << joined.status().to_string();
  EXPECT_EQ(DoorPassage::opened(), passages) << "the members grew over their nodes' links";
  // The members kept their data connection: only the newcomer's two pairs were made, each
  // counted at both of its ends (every node is in this process).
  EXPECT_EQ(mesh_links_made() - links, 4u);
  ASSERT_EQ(grown[0]->size(), 3u);
  EXPECT_EQ(grown[0]->rank(), 0u);
  EXPECT_EQ(grown[1]->rank(), 1u);
  EXPECT_EQ(joined->rank(), 2u);
  EXPECT_EQ(joined->size(), 3u);
  EXPECT_EQ(joined->epoch(), grown[0]->epoch());
  expect_all_reduce({&*grown[0], &*grown[1], &*joined});
  EXPECT_EQ(grown[0]->newcomers(), 0u);
}

// A newcomer whose job has ended (its orchestrator gone) is told so within the newcomer's reach
// window (NodeSession::kNewcomerReach), not at its join timeout (60 s here).
TEST(Elastic, ANewcomerWhoseJobIsGoneIsToldSoSoon) {
  uint16_t port = 0;
  {
    Job job(1, true);  // a daemon's port, free again once it is gone
    port = job.orch.port;
  }
  Runtime newcomer;
  Config c;
  c.num_devices = 1;
  c.num_nodes = 1;
  c.orchestrator_address = "127.0.0.1:" + std::to_string(port);
  c.node_address = "127.0.0.1";
  c.elastic = true;
  c.newcomer = true;
  c.join_timeout = 60s;
  const auto t0 = Clock::now();
  auto p = newcomer.register_peer(0, c);
  EXPECT_LT(Clock::now() - t0, 20s) << "the newcomer waited out its join timeout";
  EXPECT_TRUE(has(p.status(), Errc::unreachable, {"cannot reach the orchestrator", "has it ended?"})) << p.status().to_string();
}

// Three newcomers at once: one grow takes them all in, after the members' ranks, each rank once.
TEST(Elastic, GrowTakesInSeveralNewcomersAtOnce) {
  Job job(2, true);
  ASSERT_TRUE(job.join());
  std::vector<std::unique_ptr<Runtime>> newcomers(3);
  std::vector<Result<Peer>> joined(3, Status(Errc::internal, "not registered"));
  std::vector<std::thread> waits;
  for (std::size_t i = 0; i < newcomers.size(); ++i) {
    newcomers[i] = std::make_unique<Runtime>();
    waits.emplace_back([&, i] {
      Config mine = job.config(2);
      mine.newcomer = true;
      joined[i] = newcomers[i]->register_peer(0, mine);
    });
  }
  const std::size_t a = job.of_rank(0), b = job.of_rank(1);
  for (std::size_t i : {a, b})
    ASSERT_TRUE(RuntimeAccess::impl(*job.nodes[i]).global->wait_newcomers(3, Clock::now() + 10s))
        << "member " << i << " was never told of the three newcomers";
  auto grown = all_at_once({&*job.peers[a], &*job.peers[b]}, true);
  for (auto& th : waits) th.join();
  for (auto& g : grown) ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  std::vector<Peer*> everyone{&*grown[0], &*grown[1]};
  std::set<uint32_t> ranks;
  for (auto& j : joined) {
    ASSERT_TRUE(j.is_ok()) << j.status().to_string();
    EXPECT_EQ(j->size(), 5u);
    EXPECT_EQ(j->epoch(), 1u);
    ranks.insert(j->rank());
    everyone.push_back(&*j);
  }
  EXPECT_EQ(ranks, (std::set<uint32_t>{2, 3, 4}));
  EXPECT_EQ(grown[1]->rank(), 1u);
  expect_all_reduce(everyone);
}

TEST(Elastic, ARevokeEndsTheOpsInFlightAtEveryMemberAndTheyShrinkAll) {
  testing::EventCount entered;  // before the job: its runtimes' servers raise it
  Job job(3);
  ASSERT_TRUE(job.join());
  const std::size_t a = job.of_rank(0), b = job.of_rank(1), c = job.of_rank(2);
  testing::count_server_entries(*job.nodes[a], entered);
  // Rank 0 waits in an all-reduce that the others never call (20 s timeout).
  Tensor x = Tensor::from(std::vector<float>{1, 2});
  Work waiting = job.peers[a]->all_reduce_async(x, ReduceOp::sum);
  ASSERT_TRUE(entered.wait_for(1, 10s)) << "rank 0's all_reduce never reached its node";
  const auto revoked_at = Clock::now();
  ASSERT_TRUE(job.peers[c]->revoke().is_ok());
  const std::string by = "was revoked by node " + std::to_string(job.peers[c]->node());
  Status s = waiting.wait_for(10s);
  EXPECT_LT(Clock::now() - revoked_at, 5s) << "the op waited out its timeout instead of hearing of the revoke";
  EXPECT_TRUE(has(s, Errc::revoked, {"all_reduce #0", by})) << s.to_string();
  for (std::size_t i : {a, b, c}) {
    Tensor y = Tensor::from(std::vector<float>{1});
    Status later = job.peers[i]->all_reduce(y, ReduceOp::sum);
    EXPECT_TRUE(has(later, Errc::revoked, {by})) << i << ": " << later.to_string();
  }
  EXPECT_TRUE(job.peers[a]->revoke().is_ok());  // a second revoke changes nothing
  // Revoked, every member is alive: the shrink keeps all three.
  auto next = all_at_once({&*job.peers[a], &*job.peers[b], &*job.peers[c]}, false);
  for (auto& n : next) ASSERT_TRUE(n.is_ok()) << n.status().to_string();
  EXPECT_EQ(next[0]->size(), 3u);
  EXPECT_EQ(next[2]->rank(), 2u);
  expect_all_reduce({&*next[0], &*next[1], &*next[2]});
}

// Each round: every member hands in an all-reduce while rank 1 revokes; each op ends ok (with
// the right sum) or revoked, none waits out its timeout, and the shrink after it works.
TEST(Elastic, ARevokeRacingWithTheOpsCompletionEndsEachOneWayOrTheOther) {
  Job job(3);
  ASSERT_TRUE(job.join());
  std::vector<Peer> world;
  for (uint32_t r = 0; r < 3; ++r) world.push_back(*job.peers[job.of_rank(r)]);
  int completed = 0, revoked = 0;
  for (int round = 0; round < 8; ++round) {
    std::vector<Tensor> t;
    std::vector<Work> w;
    for (uint32_t r = 0; r < 3; ++r) t.push_back(Tensor::from(std::vector<float>{float(r + 1)}));
    for (uint32_t r = 0; r < 3; ++r) w.push_back(world[r].all_reduce_async(t[r], ReduceOp::sum));
    ASSERT_TRUE(world[1].revoke().is_ok());
    for (uint32_t r = 0; r < 3; ++r) {
      Status s = w[r].wait_for(10s);
      if (s.is_ok()) {
        ++completed;
        EXPECT_EQ(t[r].to_vector<float>()[0], 6.f);
      } else {
        ++revoked;
        EXPECT_EQ(s.code(), Errc::revoked) << s.to_string();
      }
    }
    std::vector<Peer*> callers{&world[0], &world[1], &world[2]};
    auto next = all_at_once(callers, false);
    for (uint32_t r = 0; r < 3; ++r) {
      ASSERT_TRUE(next[r].is_ok()) << next[r].status().to_string();
      world[r] = *next[r];
    }
  }
  EXPECT_EQ(completed + revoked, 24);
  expect_all_reduce({&world[0], &world[1], &world[2]});
}

// Rank 0's runtime hosts the orchestrator (as under mpirun on one host: a rendezvous file names
// it): when it goes, no next epoch can form, and the survivors' shrink says so at once rather
// than at its join timeout.
TEST(Elastic, WithoutItsHostedOrchestratorAShrinkFailsAtOnceSayingWhy) {
  char dir[] = "/tmp/chorus-elastic-XXXXXX";  // the rendezvous file's directory: this user's alone
  ASSERT_NE(mkdtemp(dir), nullptr);
  Config c;
  c.num_devices = 1;
  c.num_nodes = 3;
  c.rendezvous_file = std::string(dir) + "/job.rendezvous";
  c.node_address = "127.0.0.1";
  c.timeout = 20s;
  std::vector<std::unique_ptr<Runtime>> nodes(3);
  for (auto& r : nodes) r = std::make_unique<Runtime>();
  std::vector<Result<Peer>> peers(3, Status(Errc::internal, "not registered"));
  std::vector<std::thread> t;
  for (int i = 0; i < 3; ++i)
    t.emplace_back([&, i] {
      Config mine = c;
      mine.host_orchestrator = i == 0;
      mine.rank = i;
      peers[i] = nodes[i]->register_peer(0, mine);
    });
  for (auto& th : t) th.join();
  for (auto& p : peers) ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  nodes[0].reset();  // its orchestrator goes with it
  const auto t0 = Clock::now();
  auto next = all_at_once({&*peers[1], &*peers[2]}, false);
  EXPECT_LT(Clock::now() - t0, 10s) << "the shrink waited for its join timeout";
  for (auto& n : next) EXPECT_TRUE(has(n.status(), Errc::unreachable, {"orchestrator"})) << n.status().to_string();
  nodes.clear();
  ::rmdir(dir);  // rank 0 removed its file when it went
}

// The node processes' tests (MultiNode* is left to the ASan run, as the other suites of processes).
class MultiNodeElastic : public multi_node::MultiNode {
 protected:
  // 3 node processes of `peers` peers; the peer of rank `victim` kills its process in op 5.
  // With `freeze`, the victim stops (SIGSTOP) instead: the orchestrator finds it silent.
  void kill_and_shrink(uint32_t peers, uint32_t victim, bool freeze = false) {
    auto nodes = run_nodes({{}, {}, {}}, {"--peers", std::to_string(peers), "--scenario",
                                          freeze ? "shrink-after-freeze" : "shrink-after-kill", "--victim",
                                          std::to_string(victim), "--at-op", "5", "--ops", "20", "--elements", "1000",
                                          "--timeout-ms", "10000"});
    const uint32_t total = 3 * peers, first = victim / peers * peers;  // the victim node's ranks
    auto lines = multi_node::peer_lines(nodes);
    std::map<uint32_t, uint32_t> new_rank;  // old rank -> new
    for (const auto& n : nodes) {
      std::istringstream in(n.output);
      std::string line;
      while (std::getline(in, line)) {
        std::istringstream l(line);
        std::string tag, kind;
        uint32_t old_rank = 0, rank = 0, size = 0, epoch = 0;
        double ms = 0;
        if (!(l >> tag >> old_rank >> kind >> rank >> size >> epoch >> ms) || kind != "SHRUNK") continue;
        new_rank[old_rank] = rank;
        EXPECT_EQ(size, total - peers) << line;
        EXPECT_EQ(epoch, 1u) << line;
        EXPECT_LT(ms, 5000) << line;
      }
    }
    uint32_t next = 0;
    for (uint32_t r = 0; r < total; ++r) {
      if (r >= first && r < first + peers) continue;
      auto it = lines.find(std::to_string(r));
      ASSERT_NE(it, lines.end()) << "rank " << r << " said nothing\n" << dump(nodes);
      EXPECT_TRUE(it->second.ok) << "rank " << r << ": " << it->second.code << " " << it->second.message;
      EXPECT_EQ(it->second.ops, 20) << "rank " << r;
      EXPECT_EQ(new_rank[r], next++) << "the survivors keep their order\n" << dump(nodes);
    }
  }
};

TEST_F(MultiNodeElastic, SurvivorsShrinkAfterTheKillOfTheFirstMiddleOrLastRank) {
  start_orchestrator(3);
  for (uint32_t victim : {0u, 1u, 2u}) {
    SCOPED_TRACE("victim rank " + std::to_string(victim));
    kill_and_shrink(1, victim);
  }
}

// The same after a freeze: the survivors hear of the silent node from the orchestrator (its
// heartbeats: 500 ms here) and shrink without it.
TEST_F(MultiNodeElastic, SurvivorsShrinkAfterTheFreezeOfTheFirstMiddleOrLastRank) {
  start_orchestrator(3, {"--heartbeat-ms", "500"});
  for (uint32_t victim : {0u, 1u, 2u}) {
    SCOPED_TRACE("victim rank " + std::to_string(victim));
    kill_and_shrink(1, victim, true);
  }
}

// A member lost during the shrink: of 4 node processes, rank 1 dies in op 5, and rank 3 dies
// when it hears of it instead of shrinking, as ranks 0 and 2 go into the shrink (the orchestrator
// hears of it before their round forms or during it: either way it is left out). They form the
// epoch of the two of them (ranks 0 and 1, old order) and run 20 checked all-reduces.
TEST_F(MultiNodeElastic, AMemberLostDuringTheShrinkIsLeftOutOfIt) {
  start_orchestrator(4);
  auto nodes = run_nodes({{}, {}, {}, {}}, {"--peers", "1", "--scenario", "shrink-after-kill", "--victim", "1",
                                            "--second-victim", "3", "--at-op", "5", "--ops", "20", "--elements",
                                            "1000", "--timeout-ms", "10000"});
  auto lines = multi_node::peer_lines(nodes);
  for (const char* r : {"0", "2"}) {
    auto it = lines.find(r);
    ASSERT_NE(it, lines.end()) << "rank " << r << " said nothing\n" << dump(nodes);
    EXPECT_TRUE(it->second.ok) << "rank " << r << ": " << it->second.code << " " << it->second.message;
    EXPECT_EQ(it->second.ops, 20) << "rank " << r;
  }
  int shrunk = 0;
  for (const auto& n : nodes) {
    for (const char* want : {"PEER 0 SHRUNK 0 2 1 ", "PEER 2 SHRUNK 1 2 1 "}) shrunk += n.output.find(want) != std::string::npos;
  }
  EXPECT_EQ(shrunk, 2) << "both survivors shrink to a world of two, in their old order\n" << dump(nodes);
}

// chorus-elastic-example under chorus-run -n 4 --elastic: rank 2 is SIGKILLed mid-training; the
// survivors shrink to 3 and go on; a newcomer started with chorus-run --join makes them grow to 4
// and takes the model from rank 0; every process ends with the weights the rule gives, and both
// chorus-runs exit with 0.
TEST_F(MultiNodeElastic, TrainingGoesOnThroughAKillAndAJoin) {
  using namespace testkit;
  char dir[] = "/tmp/chorus-elastic-XXXXXX";  // the join file's directory must be this user's alone
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string join = std::string(dir) + "/job.join";
  struct RemoveDir {
    std::string path;
    ~RemoveDir() { ::rmdir(path.c_str()); }  // empty once chorus-run removed its file
  } remove_dir{dir};
  const std::vector<std::string> train{sibling("chorus-elastic-example"), "--steps", "1500", "--step-ms", "4"};
  std::vector<std::string> args{"-n", "4", "--elastic", "--join-file", join, "--tag-output"};
  args.insert(args.end(), train.begin(), train.end());
  std::vector<Child> job{spawn(sibling("chorus-run"), args, Output::pipe_with_stderr)};
  ChildGuard job_guard{job[0].pid};
  multi_node::TimedOutput out(job);
  const auto deadline = Clock::now() + 120s;
  const std::string victim_line = "[2] elastic: rank 2 of 4, pid ";
  ASSERT_TRUE(out.read_until([&] { return out.said(0, victim_line); }, deadline)) << out.dump();
  const std::string& l = out.line_of(0, victim_line)->text;
  ASSERT_EQ(kill(std::stoi(l.substr(l.find("pid ") + 4)), SIGKILL), 0);
  ASSERT_TRUE(out.read_until([&] { return out.said(0, "elastic: shrink to 3 members in "); }, deadline)) << out.dump();
  std::vector<std::string> join_args{"--join", join, "-n", "1"};
  join_args.insert(join_args.end(), train.begin(), train.end());
  std::vector<Child> newcomer{spawn(sibling("chorus-run"), join_args, Output::pipe_with_stderr)};
  ChildGuard newcomer_guard{newcomer[0].pid};
  multi_node::TimedOutput nout(newcomer);
  ASSERT_TRUE(out.read_until([&] { return out.said(0, "elastic: grow to 4 members in "); }, deadline)) << out.dump();
  ASSERT_TRUE(out.read_until([&] { return out.ended(0); }, deadline)) << out.dump();
  ASSERT_TRUE(nout.read_until([&] { return nout.ended(0); }, deadline)) << nout.dump();
  EXPECT_TRUE(out.said(0, "elastic: done steps=1500 members=4 shrinks=1 grows=1 weights ok")) << out.dump();
  EXPECT_TRUE(out.said(0, "chorus-run: rank 2 (host localhost) was killed by signal 9")) << out.dump();
  const auto job_status = wait_for(job[0].pid, 30s), newcomer_status = wait_for(newcomer[0].pid, 30s);
  job_guard.pid = newcomer_guard.pid = -1;
  ASSERT_TRUE(job_status && newcomer_status);
  EXPECT_TRUE(WIFEXITED(*job_status) && WEXITSTATUS(*job_status) == 0) << out.dump();
  EXPECT_TRUE(WIFEXITED(*newcomer_status) && WEXITSTATUS(*newcomer_status) == 0) << nout.dump();
}

TEST_F(MultiNodeElastic, NodesOfTwoPeersShrinkTogether) {
  start_orchestrator(3);
  kill_and_shrink(2, 3);  // node 1 (ranks 2 and 3) is killed
}

} // namespace
} // namespace chorus
