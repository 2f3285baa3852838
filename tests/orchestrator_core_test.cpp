// The orchestrator's admission rules on its pure core (actors/orchestrator/orchestrator_core.hpp):
// arrival order, version and config checks, node loss before and after completion, a broken
// data connection, the next collective, and the admission deadline. The real thing over CAF remoting:
// orchestrator_loopback_test.cpp; the daemon as a process: orchestrator_daemon_test.cpp.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "actors/orchestrator/orchestrator_core.hpp"
#include "orchestrator_fixtures.hpp"
#include "status_matchers.hpp"

namespace chorus {
namespace {

using Core = OrchestratorCore;
using namespace std::chrono_literals;
using namespace chorus::testing;

Core make_core(uint32_t nodes = 3) { return Core({nodes, 1000ms, {}}); }

TEST(OrchestratorCore, AdmitsInArrivalOrderWithUnevenPeers) {
  auto core = make_core(3);
  // Nodes 0 and 2 are on one host, node 1 on another: hosts are numbered by their first node.
  // Each node's GPUs go to every node as it registered them.
  auto on_host = [](NodeRegisterData r, const char* key, uint32_t gpus) {
    r.host_key = key;
    r.gpus = gpus;
    return r;
  };
  auto a = core.on_register(10, on_host(reg(3, 1, "h:1"), "boot:A", 2));
  EXPECT_TRUE(a.replies.empty());
  EXPECT_EQ(a.watch, (std::vector<Core::NodeKey>{10}));
  ASSERT_TRUE(a.timer);  // the admission deadline starts with the first node
  EXPECT_EQ(a.timer->second, 1000ms);
  auto b = core.on_register(20, on_host(reg(3, 3, "h:2"), "boot:B", 0));
  EXPECT_TRUE(b.replies.empty());
  EXPECT_FALSE(b.timer);
  EXPECT_FALSE(core.complete());
  auto c = core.on_register(30, on_host(reg(3, 2, "h:3"), "boot:A", 8));
  EXPECT_TRUE(core.complete());
  ASSERT_EQ(c.replies.size(), 3u);
  std::vector<NodeEntry> nodes{{1, 0, "h:1", 0, 0, 2}, {3, 1, "h:2", 0, 1, 0}, {2, 4, "h:3", 0, 0, 8}};
  for (uint32_t i = 0; i < 3; ++i) {
    const auto& r = c.replies[i];
    EXPECT_EQ(r.to, (i + 1) * 10u);
    ASSERT_TRUE(r.status.is_ok()) << r.status.to_string();
    EXPECT_EQ(r.topology.node_id, i);
    EXPECT_EQ(r.topology.num_nodes, 3u);
    EXPECT_EQ(r.topology.total_peers, 6u);
    EXPECT_EQ(r.topology.collective, core.collective());
    EXPECT_EQ(r.topology.nodes, nodes);
  }
}

// A node of the job that cannot be admitted (here another build) ends the admission of the nodes
// waiting with it at once, naming it and why; the next registration starts a new collective.
TEST(OrchestratorCore, ARefusedNodeEndsTheWaitingNodesAdmissionNamingIt) {
  auto core = make_core(3);
  auto started = core.on_register(1, reg(3, 1, "h:1"));
  ASSERT_TRUE(started.timer);
  (void)core.on_register(2, reg(3, 1, "h:2"));
  const uint64_t first = core.collective();
  auto v = reg(3, 1, "h:9");
  v.protocol_version = protocol_version() + 1;
  auto fx = core.on_register(9, v);
  ASSERT_EQ(fx.replies.size(), 3u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(fx.replies[i].to, static_cast<Core::NodeKey>(i + 1));
    EXPECT_TRUE(has(fx.replies[i].status, Errc::version_mismatch,
                    {"collective " + std::to_string(first) + " cannot be complete", "the node at h:9 was refused",
                     "protocol version"}));
  }
  EXPECT_EQ(fx.replies[2].to, 9u);
  EXPECT_TRUE(has(fx.replies[2].status, Errc::version_mismatch, {"protocol version", std::to_string(protocol_version())}));
  EXPECT_EQ(fx.forget, (std::vector<Core::NodeKey>{1, 2}));
  EXPECT_EQ(core.registered(), 0u);
  EXPECT_EQ(core.collective(), first + 1);
  EXPECT_TRUE(core.on_timeout(started.timer->first).replies.empty());  // the old admission's deadline is stale now
  EXPECT_TRUE(core.on_register(1, reg(3, 1, "h:1")).replies.empty());
  EXPECT_EQ(core.registered(), 1u);
}

TEST(OrchestratorCore, ConfigMismatchNamesTheField) {
  auto refused = [](auto change, std::vector<std::string> words) {
    auto core = make_core(3);
    (void)core.on_register(1, reg(3, 2, "h:1"));
    auto r = reg(3, 4, "h:2");  // other peer count and address: allowed
    r.config.orchestrator_address = "orch.example:4000";  // another name for the orchestrator: allowed
    r.config.timeout = 5ms;  // each process's own
    EXPECT_TRUE(core.on_register(2, r).replies.empty());
    auto bad = reg(3, 1, "h:3");
    change(bad.config);
    auto fx = core.on_register(3, bad);
    ASSERT_EQ(fx.replies.size(), 3u);  // the two waiting, then the refused one
    EXPECT_TRUE(has(fx.replies[2].status, Errc::config_mismatch, words));
    words.push_back("the node at h:3 was refused");
    EXPECT_TRUE(has(fx.replies[0].status, Errc::config_mismatch, words));
    EXPECT_EQ(core.registered(), 0u);
  };
  refused([](Config& c) { c.auto_tree_arity = 4; }, {"auto_tree_arity (4 vs 2)"});
  refused([](Config& c) { c.global[0] = StrategyChoice{false, {Algorithm::ring, 2}}; }, {"global strategy for all_reduce"});
}

// A launcher's ranks are the node ids; nodes without one fill the ids left in arrival order.
TEST(OrchestratorCore, RanksGivenAreTheNodeIds) {
  auto core = make_core(4);
  auto ranked = [](NodeRegisterData r, int32_t rank) {
    r.rank = rank;
    return r;
  };
  EXPECT_TRUE(core.on_register(10, ranked(reg(4, 1, "h:a"), 2)).replies.empty());
  EXPECT_TRUE(core.on_register(20, reg(4, 2, "h:b")).replies.empty());
  EXPECT_TRUE(core.on_register(30, ranked(reg(4, 1, "h:c"), 0)).replies.empty());
  auto fx = core.on_register(40, reg(4, 1, "h:d"));
  ASSERT_EQ(fx.replies.size(), 4u);
  std::map<Core::NodeKey, uint32_t> id;
  for (const auto& r : fx.replies) {
    ASSERT_TRUE(r.status.is_ok()) << r.status.to_string();
    id[r.to] = r.topology.node_id;
  }
  EXPECT_EQ(id, (std::map<Core::NodeKey, uint32_t>{{10, 2}, {20, 1}, {30, 0}, {40, 3}}));
  // Peer offsets follow the node ids: c (1 peer), b (2), a (1), d (1).
  const auto& nodes = fx.replies[0].topology.nodes;
  ASSERT_EQ(nodes.size(), 4u);
  EXPECT_EQ(nodes[0].data_address, "h:c");
  EXPECT_EQ(nodes[1].data_address, "h:b");
  EXPECT_EQ(nodes[2].peer_offset, 3u);
  EXPECT_EQ(nodes[3].data_address, "h:d");
  EXPECT_EQ(core.member_keys(), (std::vector<Core::NodeKey>{30, 20, 10, 40}));
}

TEST(OrchestratorCore, ARankTakenOrOutOfRangeIsRefusedNamingIt) {
  auto core = make_core(2);
  auto r = reg(2, 1, "h:1");
  r.rank = 1;
  EXPECT_TRUE(core.on_register(1, r).replies.empty());
  auto twice = reg(2, 1, "h:2");
  twice.rank = 1;
  auto fx = core.on_register(2, twice);
  ASSERT_EQ(fx.replies.size(), 2u);
  EXPECT_TRUE(has(fx.replies[1].status, Errc::invalid_argument, {"rank 1 is taken already, by the node at h:1"}));
  EXPECT_TRUE(has(fx.replies[0].status, Errc::invalid_argument, {"the node at h:2 was refused", "rank 1 is taken"}));
  auto far = reg(2, 1, "h:3");
  far.rank = 2;
  fx = core.on_register(3, far);  // the first of a new admission: it alone is answered
  ASSERT_EQ(fx.replies.size(), 1u);
  EXPECT_TRUE(has(fx.replies[0].status, Errc::invalid_argument, {"rank 2 is not a node of 2"}));
}

TEST(OrchestratorCore, NumNodesMustMatchTheOrchestrator) {
  auto core = make_core(3);
  auto fx = core.on_register(1, reg(2, 1, "h:1"));
  ASSERT_EQ(fx.replies.size(), 1u);
  EXPECT_TRUE(has(fx.replies[0].status, Errc::config_mismatch, {"num_nodes (2 vs 3"}));
  EXPECT_EQ(core.registered(), 0u);
}

TEST(OrchestratorCore, RejectsInvalidConfigAndBadNodeFields) {
  auto core = make_core(2);
  auto r = reg(2, 1, "h:1");
  r.config.timeout = 0ms;
  EXPECT_TRUE(has(core.on_register(1, r).replies.at(0).status, Errc::invalid_config, {"timeout"}));
  r = reg(2, 1, "h:1");
  r.num_peers = 0;
  EXPECT_TRUE(has(core.on_register(1, r).replies.at(0).status, Errc::invalid_argument, {"num_peers is 0"}));
  // Found by tests/fuzz/registration_fuzz: a count near 2^32 wrapped the topology's peer
  // offsets and total (4 billion peers and 2 more made 1).
  r = reg(2, 1, "h:1");
  r.num_peers = 0xFFFFFFFFu;
  EXPECT_TRUE(has(core.on_register(1, r).replies.at(0).status, Errc::invalid_argument,
                  {"num_peers 4294967295 exceeds 4096"}));
  r.num_peers = Config::kMaxDevices + 1;
  EXPECT_TRUE(has(core.on_register(1, r).replies.at(0).status, Errc::invalid_argument, {"num_peers 4097"}));
  r = reg(2, 1, "");
  r.config.node_address = "h:1";
  EXPECT_TRUE(has(core.on_register(1, r).replies.at(0).status, Errc::invalid_argument, {"data_address"}));
  ASSERT_TRUE(core.on_register(1, reg(2, 1, "h:1")).replies.empty());
  EXPECT_TRUE(has(core.on_register(1, reg(2, 1, "h:9")).replies.at(0).status, Errc::register_twice, {}));
  EXPECT_TRUE(has(core.on_register(2, reg(2, 1, "h:1")).replies.at(0).status, Errc::invalid_argument,
                  {"h:1", "already used"}));
  EXPECT_EQ(core.registered(), 0u);  // node 1 was told that this job's node 2 was refused
  // The decoder's text (with Cap'n Proto's stack) stays out of the reply, and a garbled message
  // ends nobody's admission (it cannot be told whose it is).
  ASSERT_TRUE(core.on_register(1, reg(2, 1, "h:1")).replies.empty());
  auto fx = core.on_garbled(3);
  ASSERT_EQ(fx.replies.size(), 1u);
  EXPECT_EQ(fx.replies[0].status, Status(Errc::invalid_argument, "garbled registration"));
  EXPECT_EQ(core.registered(), 1u);
}

TEST(OrchestratorCore, NodeLostBeforeCompletionFreesItsSlot) {
  auto core = make_core(3);
  (void)core.on_register(1, reg(3, 1, "h:1"));
  (void)core.on_register(2, reg(3, 2, "h:2"));
  auto fx = core.on_down(1, "connection lost");
  EXPECT_TRUE(fx.replies.empty());
  EXPECT_EQ(fx.forget, (std::vector<Core::NodeKey>{1}));
  EXPECT_EQ(core.registered(), 1u);
  EXPECT_TRUE(core.lost().empty());  // nothing had started
  // A node that leaves while waiting gets an answer and frees its slot too.
  (void)core.on_register(3, reg(3, 1, "h:3"));
  fx = core.on_leave(3);
  ASSERT_EQ(fx.replies.size(), 1u);
  EXPECT_TRUE(has(fx.replies[0].status, Errc::finished, {"left before"}));
  (void)core.on_register(4, reg(3, 1, "h:1"));  // the lost node's address is free again
  fx = core.on_register(5, reg(3, 3, "h:5"));
  ASSERT_EQ(fx.replies.size(), 3u);
  EXPECT_EQ(fx.replies[0].to, 2u);
  EXPECT_EQ(fx.replies[0].topology.nodes,
            (std::vector<NodeEntry>{{2, 0, "h:2", 0, 0}, {1, 2, "h:1", 0, 1}, {3, 3, "h:5", 0, 2}}))
      << "a node without a host key is a host of its own";
  // Stray events about non-members change nothing.
  EXPECT_TRUE(core.on_down(1, "late").forget.empty());
  EXPECT_TRUE(core.on_leave(99).forget.empty());
}

TEST(OrchestratorCore, NodeLostAfterCompletionIsReportedToSurvivors) {
  auto core = make_core(3);
  (void)core.on_register(1, reg(3, 1, "h:1"));
  (void)core.on_register(2, reg(3, 1, "h:2"));
  (void)core.on_register(3, reg(3, 1, "h:3"));
  ASSERT_TRUE(core.complete());
  auto fx = core.on_down(2, "node lost: killed");
  ASSERT_EQ(fx.notices.size(), 2u);
  EXPECT_EQ(fx.notices[0].to, 1u);
  EXPECT_EQ(fx.notices[1].to, 3u);
  EXPECT_EQ(fx.notices[0].lost.node_id, 1u);
  EXPECT_EQ(fx.notices[0].lost.reason, "node lost: killed");
  ASSERT_EQ(core.lost().size(), 1u);
  EXPECT_EQ(core.lost()[0].node_id, 1u);
  EXPECT_EQ(core.lost()[0].collective, core.collective());
  EXPECT_TRUE(core.complete());  // the survivors still hold the collective
  // While the collective runs, a newcomer is turned away.
  EXPECT_TRUE(has(core.on_register(9, reg(3, 1, "h:9")).replies.at(0).status, Errc::busy, {"complete"}));
  // A second loss reports only to the remaining survivor.
  fx = core.on_down(3, "node lost: frozen");
  ASSERT_EQ(fx.notices.size(), 1u);
  EXPECT_EQ(fx.notices[0].to, 1u);
  EXPECT_EQ(fx.notices[0].lost.node_id, 2u);
  // The last survivor leaves: nothing of the collective is kept for the next one.
  fx = core.on_leave(1);
  EXPECT_EQ(fx.forget, (std::vector<Core::NodeKey>{1}));
  EXPECT_FALSE(core.complete());
  EXPECT_TRUE(core.lost().empty());
}

Core running_core(uint32_t nodes) {
  auto core = make_core(nodes);
  for (uint32_t k = 1; k <= nodes; ++k) (void)core.on_register(k, reg(nodes, 1, "h:" + std::to_string(k)));
  return core;
}

// What chorus-ctl status shows: every member, joined, left (goodbye) or lost (with why).
TEST(OrchestratorCore, MembershipSaysWhoIsInWhoLeftAndWhoWasLostAndWhy) {
  auto core = make_core(3);
  (void)core.on_register(1, reg(3, 1, "h:1"));
  EXPECT_TRUE(core.membership().empty());  // not complete: no node ids yet
  (void)core.on_register(2, reg(3, 1, "h:2"));
  (void)core.on_register(3, reg(3, 1, "h:3"));
  using S = JobMemberData::State;
  EXPECT_EQ(core.membership(), (std::vector<JobMemberData>{{0, S::joined, ""}, {1, S::joined, ""}, {2, S::joined, ""}}));
  (void)core.on_down(3, "node lost: frozen");
  (void)core.on_leave(2);
  EXPECT_EQ(core.membership(),
            (std::vector<JobMemberData>{{0, S::joined, ""}, {1, S::left, ""}, {2, S::lost, "node lost: frozen"}}));
  (void)core.on_leave(1);  // the last one: the next collective starts from nothing
  EXPECT_TRUE(core.membership().empty());
}

TEST(OrchestratorCore, ABrokenLinkFromAMemberIsToldOnceToEveryOtherMember) {
  auto core = running_core(4);  // keys 1..4 are nodes 0..3
  ASSERT_TRUE(core.complete());
  const LinkLostData l{core.collective(), 2, 0, "the connection failed: Connection reset by peer"};
  auto fx = core.on_link_lost(3, l);  // key 3 is node 2
  EXPECT_EQ(fx.ignored, "");
  ASSERT_EQ(fx.link_notices.size(), 3u);  // nodes 0, 1, 3: the reporter knows
  std::vector<Core::NodeKey> to;
  for (const auto& n : fx.link_notices) {
    to.push_back(n.to);
    EXPECT_EQ(n.link, l);
  }
  EXPECT_EQ(to, (std::vector<Core::NodeKey>{1, 2, 4}));
  EXPECT_TRUE(fx.notices.empty() && fx.forget.empty() && fx.replies.empty());
  ASSERT_TRUE(core.link_lost());
  EXPECT_EQ(*core.link_lost(), l);
  // The other end's report of the same link, or of another: the first is what every op reports.
  fx = core.on_link_lost(1, {core.collective(), 0, 2, "the connection failed: Software caused connection abort"});
  EXPECT_TRUE(fx.link_notices.empty());
  EXPECT_NE(fx.ignored.find("first broken link was told already"), std::string::npos) << fx.ignored;
  EXPECT_TRUE(core.on_link_lost(4, {core.collective(), 3, 1, "x"}).link_notices.empty());
}

TEST(OrchestratorCore, ALinkReportIsIgnoredUnlessAMemberReportsItsOwnLinkInThisCollective) {
  auto core = running_core(3);
  const uint64_t c = core.collective();
  auto ignored = [&](Core::NodeKey who, LinkLostData l, const std::string& why) {
    auto fx = core.on_link_lost(who, l);
    EXPECT_TRUE(fx.link_notices.empty()) << why;
    EXPECT_NE(fx.ignored.find(why), std::string::npos) << fx.ignored;
  };
  ignored(99, {c, 0, 1, "x"}, "no member");                        // not a member
  ignored(1, {c + 1, 0, 1, "x"}, "for collective " + std::to_string(c + 1));  // another collective
  ignored(1, {c - 1, 0, 1, "x"}, "(running: " + std::to_string(c) + ")");
  ignored(1, {c, 1, 2, "x"}, "node 0 reported a link as node 1");  // in another node's name
  ignored(1, {c, 0, 3, "x"}, "a link to node 3 of 3");             // no such node
  ignored(1, {c, 0, 0, "x"}, "a link to node 0 of 3");
  EXPECT_FALSE(core.link_lost());
  // A link to a node that is gone: its loss was told, and is what every op reports.
  ASSERT_EQ(core.on_down(2, "node lost: killed").notices.size(), 2u);
  ignored(1, {c, 0, 1, "x"}, "node 1 is gone already");
  ignored(2, {c, 1, 0, "x"}, "no member");  // the lost node itself
  // Before the collective is complete, nobody has a data connection to lose.
  auto waiting = make_core(3);
  (void)waiting.on_register(1, reg(3, 1, "h:1"));
  (void)waiting.on_register(2, reg(3, 1, "h:2"));
  auto fx = waiting.on_link_lost(1, {waiting.collective(), 0, 1, "x"});
  EXPECT_TRUE(fx.link_notices.empty());
  EXPECT_FALSE(fx.ignored.empty());
  // A valid report is still told once, and forgotten with its collective.
  fx = core.on_link_lost(3, {c, 2, 0, "garbled frame on the data connection"});
  ASSERT_EQ(fx.link_notices.size(), 1u);
  EXPECT_EQ(fx.link_notices[0].to, 1u);
  (void)core.on_leave(1);
  (void)core.on_leave(3);
  EXPECT_EQ(core.collective(), c + 1);
  EXPECT_FALSE(core.link_lost());
}

TEST(OrchestratorCore, NextCollectiveAfterAllLeft) {
  auto core = make_core(2);
  auto first = core.collective();
  (void)core.on_register(1, reg(2, 1, "h:1"));
  (void)core.on_register(2, reg(2, 1, "h:2"));
  ASSERT_TRUE(core.complete());
  auto fx = core.on_leave(1);
  EXPECT_TRUE(fx.notices.empty());  // leaving is no loss
  EXPECT_TRUE(core.complete());
  fx = core.on_down(2, "exited");  // the last one simply disconnects
  EXPECT_TRUE(fx.notices.empty());
  EXPECT_FALSE(core.complete());
  EXPECT_EQ(core.registered(), 0u);
  EXPECT_EQ(core.collective(), first + 1);
  // The next collective may use another configuration entirely.
  auto r = reg(2, 4, "h:7");
  r.config.auto_tree_arity = 3;
  fx = core.on_register(7, r);
  EXPECT_TRUE(fx.timer);
  auto r2 = reg(2, 4, "h:8");
  r2.config.auto_tree_arity = 3;
  fx = core.on_register(8, r2);
  ASSERT_EQ(fx.replies.size(), 2u);
  EXPECT_EQ(fx.replies[0].topology.collective, first + 1);
  EXPECT_EQ(fx.replies[0].topology.total_peers, 8u);
}

TEST(OrchestratorCore, AdmissionTimesOutNamingTheCount) {
  auto core = make_core(3);
  auto fx = core.on_register(1, reg(3, 1, "h:1"));
  auto timer = fx.timer->first;
  (void)core.on_register(2, reg(3, 1, "h:2"));
  EXPECT_TRUE(core.on_timeout(timer + 100).replies.empty());  // stale or unknown tick
  fx = core.on_timeout(timer);
  ASSERT_EQ(fx.replies.size(), 2u);
  EXPECT_TRUE(has(fx.replies[0].status, Errc::timeout, {"only 2 of 3 nodes", "1000 ms"}));
  EXPECT_EQ(fx.forget.size(), 2u);
  EXPECT_EQ(core.registered(), 0u);
  EXPECT_TRUE(core.on_timeout(timer).replies.empty());  // fires once
  // A fresh collective starts its own deadline.
  fx = core.on_register(3, reg(3, 1, "h:1"));
  ASSERT_TRUE(fx.timer);
  EXPECT_NE(fx.timer->first, timer);
}

} // namespace
} // namespace chorus
