// The orchestrator's membership epochs on its pure core (orchestrator_epochs.cpp): a shrink after
// a loss, one that excludes a live node, a loss during the shrink, a forged or mismatched rejoin,
// the round's deadline, a late rejoin, and the grow of an elastic job with its newcomers. The
// members' side (Peer::shrink, Peer::grow) across node processes: elastic_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "actors/orchestrator/orchestrator_core.hpp"
#include "orchestrator_fixtures.hpp"
#include "status_matchers.hpp"

namespace chorus {
namespace {

using Core = OrchestratorCore;
using Kind = RejoinData::Kind;
using namespace std::chrono_literals;
using namespace chorus::testing;

// A core with `n` nodes admitted (keys 10, 20, ...; addresses h:1, h:2, ...), and what each was told.
struct Admitted {
  Core core;
  std::vector<TopologyData> topo;  // by node id
  explicit Admitted(uint32_t n, bool elastic = false)
      : core({n, 1000ms, [next = uint64_t{1000}]() mutable { return next++; }}) {
    Core::Effects fx;
    for (uint32_t i = 0; i < n; ++i) {
      auto r = reg(n, 1, "h:" + std::to_string(i + 1));
      r.config.elastic = elastic;
      fx = core.on_register(key(i), r);
    }
    EXPECT_TRUE(core.complete());
    for (const auto& rep : fx.replies) topo.push_back(rep.topology);
    elastic_ = elastic;
  }
  static Core::NodeKey key(uint32_t id) { return 10 * (id + 1); }
  // The rejoin of node `id` from a new actor (key 100 + id), at a new data address.
  NodeRegisterData rejoin(uint32_t id, Kind kind, std::vector<uint32_t> exclude = {}) const {
    auto r = reg(topo[id].num_nodes, 1, "h:new" + std::to_string(id));
    r.config.elastic = elastic_;
    r.rejoin = {kind, topo[id].collective, id, topo[id].ticket, std::move(exclude), {}};
    return r;
  }
  bool elastic_ = false;
};

std::vector<Core::NodeKey> to(const Core::Effects& fx) {
  std::vector<Core::NodeKey> keys;
  for (const auto& r : fx.replies) keys.push_back(r.to);
  return keys;
}

TEST(OrchestratorEpochs, ShrinkAfterALossRenumbersTheSurvivorsInTheirOrder) {
  Admitted a(3);
  const uint64_t first = a.core.collective();
  auto down = a.core.on_down(Admitted::key(1), "killed");
  EXPECT_EQ(down.notices.size(), 2u);
  auto r0 = a.core.on_register(100, a.rejoin(0, Kind::shrink));
  EXPECT_TRUE(r0.replies.empty());
  ASSERT_TRUE(r0.timer);  // the round's deadline
  EXPECT_EQ(r0.watch, (std::vector<Core::NodeKey>{100}));
  EXPECT_EQ(a.core.rejoined(), (std::vector<uint32_t>{0}));
  auto r2 = a.core.on_register(102, a.rejoin(2, Kind::shrink));
  ASSERT_EQ(to(r2), (std::vector<Core::NodeKey>{100, 102}));
  EXPECT_EQ(a.core.collective(), first + 1);
  EXPECT_EQ(a.core.epoch(), 1u);
  EXPECT_TRUE(a.core.rejoined().empty());
  std::vector<NodeEntry> nodes{{1, 0, "h:new0", 0, 0, 0}, {1, 1, "h:new2", 0, 1, 0}};  // no host key: hosts apart
  for (uint32_t i = 0; i < 2; ++i) {
    const auto& t = r2.replies[i].topology;
    ASSERT_TRUE(r2.replies[i].status.is_ok()) << r2.replies[i].status.to_string();
    EXPECT_EQ(t.node_id, i);
    EXPECT_EQ(t.num_nodes, 2u);
    EXPECT_EQ(t.total_peers, 2u);
    EXPECT_EQ(t.epoch, 1u);
    EXPECT_EQ(t.collective, first + 1);
    EXPECT_EQ(t.previous, (std::vector<int32_t>{0, 2}));
    EXPECT_EQ(t.nodes, nodes);
  }
  EXPECT_NE(r2.replies[0].topology.token, a.topo[0].token);  // a new token for the new epoch
  EXPECT_NE(r2.replies[0].topology.ticket, r2.replies[1].topology.ticket);
  // The old incarnations are forgotten (node 1's when it was lost).
  EXPECT_EQ(r2.forget, (std::vector<Core::NodeKey>{10, 30}));
  EXPECT_EQ(a.core.member_keys(), (std::vector<Core::NodeKey>{100, 102}));
  // Their goodbyes come later and change nothing; the new members' membership is whole.
  EXPECT_TRUE(a.core.on_leave(10).replies.empty());
  for (const auto& m : a.core.membership()) EXPECT_EQ(m.state, JobMemberData::State::joined);
  // A loss in the new epoch is told to the new members by their new ids.
  auto lost = a.core.on_down(102, "killed again");
  ASSERT_EQ(lost.notices.size(), 1u);
  EXPECT_EQ(lost.notices[0].to, 100u);
  EXPECT_EQ(lost.notices[0].lost.node_id, 1u);
  EXPECT_EQ(lost.notices[0].lost.collective, first + 1);
}

TEST(OrchestratorEpochs, AMemberLostDuringTheShrinkIsLeftOut) {
  Admitted a(4);
  (void)a.core.on_down(Admitted::key(3), "killed");
  (void)a.core.on_register(100, a.rejoin(0, Kind::shrink));
  (void)a.core.on_register(101, a.rejoin(1, Kind::shrink));
  EXPECT_EQ(a.core.epoch(), 0u);  // node 2 has not come
  auto fx = a.core.on_down(Admitted::key(2), "frozen");
  EXPECT_EQ(fx.notices.size(), 2u);  // the loss is told, then the round forms without it
  ASSERT_EQ(to(fx), (std::vector<Core::NodeKey>{100, 101}));
  EXPECT_EQ(fx.replies[0].topology.previous, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(a.core.epoch(), 1u);
  // Node 2 resumes and tries to shrink too: it learns it was dropped, and why.
  auto late = a.core.on_register(102, a.rejoin(2, Kind::shrink));
  ASSERT_EQ(late.replies.size(), 1u);
  EXPECT_TRUE(has(late.replies[0].status, Errc::node_lost, {"shrink of collective", "was declared lost: frozen"}));
  EXPECT_EQ(a.core.member_keys(), (std::vector<Core::NodeKey>{100, 101}));
}

// A link that ended on one side only (node 0 cut its link to node 2; node 2 still holds it) is
// remade on both sides: each of the two learns the other's new id in its topology's `relink`.
// A link to a node not in the next epoch (lost node 3) is no pair to remake; and a rejoin that
// names itself or a node out of range is refused.
TEST(OrchestratorEpochs, ALinkOneSideCouldNotKeepIsRemadeOnBothSides) {
  Admitted a(4);
  (void)a.core.on_down(Admitted::key(3), "killed");
  auto r0 = a.rejoin(0, Kind::shrink);
  r0.rejoin.unkept = {2, 3};
  (void)a.core.on_register(100, r0);
  auto self = a.rejoin(1, Kind::shrink);
  self.rejoin.unkept = {1};
  EXPECT_TRUE(has(a.core.on_register(666, self).replies.at(0).status, Errc::invalid_argument,
                  {"it names node 1 of 4 as a link it cannot keep"}));
  auto far = a.rejoin(1, Kind::shrink);
  far.rejoin.unkept = {4};
  EXPECT_TRUE(has(a.core.on_register(667, far).replies.at(0).status, Errc::invalid_argument, {"node 4 of 4"}));
  (void)a.core.on_register(101, a.rejoin(1, Kind::shrink));
  auto fx = a.core.on_register(102, a.rejoin(2, Kind::shrink));
  ASSERT_EQ(to(fx), (std::vector<Core::NodeKey>{100, 101, 102}));
  EXPECT_EQ(fx.replies[0].topology.relink, (std::vector<uint32_t>{2}));
  EXPECT_TRUE(fx.replies[1].topology.relink.empty());
  EXPECT_EQ(fx.replies[2].topology.relink, (std::vector<uint32_t>{0}));
  // The next shrink starts clean: nothing to remake unless a rejoin says so again.
  (void)a.core.on_down(102, "killed");
  a.topo = {fx.replies[0].topology, fx.replies[1].topology, fx.replies[2].topology};
  (void)a.core.on_register(200, a.rejoin(0, Kind::shrink));
  auto next = a.core.on_register(201, a.rejoin(1, Kind::shrink));
  ASSERT_EQ(to(next), (std::vector<Core::NodeKey>{200, 201}));
  for (const auto& rep : next.replies) EXPECT_TRUE(rep.topology.relink.empty());
}

TEST(OrchestratorEpochs, ShrinkExcludesALiveNode) {
  Admitted a(3);
  (void)a.core.on_register(100, a.rejoin(0, Kind::shrink, {2}));
  auto fx = a.core.on_register(101, a.rejoin(1, Kind::shrink, {2}));
  ASSERT_EQ(to(fx), (std::vector<Core::NodeKey>{100, 101}));
  EXPECT_EQ(fx.forget, (std::vector<Core::NodeKey>{10, 20, 30}));  // node 2's too: it is out
  auto late = a.core.on_register(102, a.rejoin(2, Kind::shrink, {2}));
  ASSERT_EQ(late.replies.size(), 1u);
  EXPECT_TRUE(has(late.replies[0].status, Errc::revoked, {"was excluded by the shrink"}));
}

TEST(OrchestratorEpochs, AForgedOrMismatchedRejoinIsRefusedAloneAndTheRoundGoesOn) {
  Admitted a(3);
  (void)a.core.on_down(Admitted::key(2), "killed");
  (void)a.core.on_register(100, a.rejoin(0, Kind::shrink));
  // Node 0's ticket presented as node 1's: a member cannot speak for another.
  auto forged = a.rejoin(1, Kind::shrink);
  forged.rejoin.ticket = a.topo[0].ticket;
  auto f = a.core.on_register(666, forged);
  ASSERT_EQ(to(f), (std::vector<Core::NodeKey>{666}));
  EXPECT_TRUE(has(f.replies[0].status, Errc::auth_failed, {"node 1 is not a member with that ticket"}));
  // Another exclude list than the round's; a grow during a shrink; node 0 twice.
  auto other = a.core.on_register(667, a.rejoin(1, Kind::shrink, {0}));
  EXPECT_TRUE(has(other.replies.at(0).status, Errc::invalid_argument, {"excludes nodes [0], the others []"}));
  auto twice = a.core.on_register(668, a.rejoin(0, Kind::shrink));
  EXPECT_TRUE(has(twice.replies.at(0).status, Errc::register_twice, {"node 0 called it already"}));
  auto self = a.rejoin(1, Kind::shrink, {1});
  EXPECT_TRUE(has(a.core.on_register(669, self).replies.at(0).status, Errc::invalid_argument, {"excludes the caller's own node"}));
  auto bad_config = a.rejoin(1, Kind::shrink);
  bad_config.config.auto_tree_arity = 7;
  EXPECT_TRUE(has(a.core.on_register(670, bad_config).replies.at(0).status, Errc::config_mismatch, {"auto_tree_arity"}));
  EXPECT_TRUE(has(a.core.on_register(671, a.rejoin(1, Kind::grow)).replies.at(0).status, Errc::invalid_config,
                  {"not elastic"}));
  EXPECT_EQ(a.core.rejoined(), (std::vector<uint32_t>{0}));
  auto ok = a.core.on_register(101, a.rejoin(1, Kind::shrink));
  ASSERT_EQ(to(ok), (std::vector<Core::NodeKey>{100, 101}));
  EXPECT_EQ(ok.replies[1].topology.previous, (std::vector<int32_t>{0, 1}));
}

TEST(OrchestratorEpochs, TheRoundsDeadlineNamesWhoDidNotComeAndTheCollectiveStays) {
  Admitted a(3);
  (void)a.core.on_down(Admitted::key(0), "killed");
  auto started = a.core.on_register(101, a.rejoin(1, Kind::shrink));
  ASSERT_TRUE(started.timer);
  auto fx = a.core.on_timeout(started.timer->first);
  ASSERT_EQ(to(fx), (std::vector<Core::NodeKey>{101}));
  EXPECT_TRUE(has(fx.replies[0].status, Errc::timeout, {"the shrink of collective", "node(s) 2 did not call it within 1000 ms"}));
  EXPECT_EQ(fx.forget, (std::vector<Core::NodeKey>{101}));
  EXPECT_TRUE(a.core.complete());
  EXPECT_EQ(a.core.epoch(), 0u);
  // A second try, with both this time, forms the epoch; the first round's deadline is stale.
  auto again = a.core.on_register(201, a.rejoin(1, Kind::shrink));
  EXPECT_TRUE(a.core.on_timeout(started.timer->first).replies.empty());
  auto done = a.core.on_register(202, a.rejoin(2, Kind::shrink));
  EXPECT_EQ(to(done), (std::vector<Core::NodeKey>{201, 202}));
  EXPECT_TRUE(a.core.on_timeout(again.timer->first).replies.empty());
}

TEST(OrchestratorEpochs, ARejoinThatGoesAwayIsDroppedAndItsMemberMayComeAgain) {
  Admitted a(3);
  (void)a.core.on_register(100, a.rejoin(0, Kind::shrink, {2}));
  auto gone = a.core.on_leave(100);
  ASSERT_EQ(to(gone), (std::vector<Core::NodeKey>{100}));
  EXPECT_EQ(gone.replies[0].status.code(), Errc::finished);
  EXPECT_TRUE(a.core.rejoined().empty());
  EXPECT_TRUE(a.core.on_register(200, a.rejoin(0, Kind::shrink, {2})).replies.empty());
  auto fx = a.core.on_register(201, a.rejoin(1, Kind::shrink, {2}));
  ASSERT_EQ(to(fx), (std::vector<Core::NodeKey>{200, 201}));
  EXPECT_EQ(fx.replies[0].topology.num_nodes, 2u);
}

TEST(OrchestratorEpochs, GrowTakesInTheNewcomersOfAnElasticJob) {
  Admitted a(2, true);
  // A newcomer waits; one with another config is refused alone, without disturbing the job.
  auto newcomer = reg(2, 2, "h:9");
  newcomer.config.elastic = true;
  newcomer.config.num_devices = 2;
  newcomer.newcomer = true;
  auto w = a.core.on_register(90, newcomer);
  EXPECT_TRUE(w.replies.empty());
  EXPECT_EQ(w.watch, (std::vector<Core::NodeKey>{90}));
  EXPECT_EQ(a.core.newcomers(), 1u);
  auto wrong = reg(2, 1, "h:8");
  wrong.config.elastic = true;
  wrong.config.auto_threshold_bytes = 1;
  wrong.newcomer = true;
  auto refused = a.core.on_register(80, wrong);
  ASSERT_EQ(to(refused), (std::vector<Core::NodeKey>{80}));
  EXPECT_TRUE(has(refused.replies[0].status, Errc::config_mismatch, {"newcomer", "auto_threshold_bytes"}));
  EXPECT_TRUE(refused.forget.empty());
  EXPECT_EQ(a.core.newcomers(), 1u);
  (void)a.core.on_register(100, a.rejoin(0, Kind::grow));
  auto fx = a.core.on_register(101, a.rejoin(1, Kind::grow));
  ASSERT_EQ(to(fx), (std::vector<Core::NodeKey>{100, 101, 90}));
  for (uint32_t i = 0; i < 3; ++i) {
    const auto& t = fx.replies[i].topology;
    EXPECT_EQ(t.node_id, i);
    EXPECT_EQ(t.num_nodes, 3u);
    EXPECT_EQ(t.total_peers, 4u);  // the newcomer hosts 2 peers
    EXPECT_EQ(t.previous, (std::vector<int32_t>{0, 1, -1}));
    EXPECT_EQ(t.epoch, 1u);
  }
  EXPECT_EQ(a.core.newcomers(), 0u);
  // A newcomer to a job that is not elastic is told the job is running.
  Admitted fixed(2);
  auto busy = fixed.core.on_register(90, reg(2, 1, "h:9"));
  EXPECT_TRUE(has(busy.replies.at(0).status, Errc::busy, {"is complete and running"}));
}

// A newcomer (chorus-run --join) that comes while the job is still being admitted, or to a job
// that is not elastic, is refused alone: it never takes a first node's place or ends the admission.
TEST(OrchestratorEpochs, ANewcomerNeverJoinsOrEndsAnAdmission) {
  Core core({3, 1000ms, {}});
  auto first = reg(3, 1, "h:1");
  first.config.elastic = true;
  auto second = first;
  second.data_address = "h:2";
  (void)core.on_register(10, first);
  (void)core.on_register(20, second);
  auto early = reg(1, 1, "h:9");  // its own idea of the size: a newcomer's is never compared
  early.config.elastic = true;
  early.newcomer = true;
  auto fx = core.on_register(90, early);
  ASSERT_EQ(to(fx), (std::vector<Core::NodeKey>{90}));
  EXPECT_TRUE(has(fx.replies[0].status, Errc::busy, {"a newcomer", "being admitted"}));
  EXPECT_TRUE(fx.forget.empty());
  EXPECT_EQ(core.registered(), 2u);
  auto third = first;
  third.data_address = "h:3";
  EXPECT_EQ(core.on_register(30, third).replies.size(), 3u);  // the job forms as it would have
  EXPECT_TRUE(core.on_register(91, early).replies.empty());   // now it waits for a grow
  EXPECT_EQ(core.newcomers(), 1u);
  Admitted fixed(2);
  auto late = reg(2, 1, "h:9");
  late.newcomer = true;
  EXPECT_TRUE(has(fixed.core.on_register(90, late).replies.at(0).status, Errc::busy, {"not elastic"}));
}

// The round's exclude list is whoever came first's; a member that disagrees is told both lists,
// and a grow excludes nobody.
TEST(OrchestratorEpochs, DisagreeingExcludeListsAreNamedAndAGrowExcludesNobody) {
  Admitted a(4, true);
  (void)a.core.on_register(100, a.rejoin(0, Kind::shrink, {2, 3}));
  auto other = a.core.on_register(101, a.rejoin(1, Kind::shrink));
  EXPECT_TRUE(has(other.replies.at(0).status, Errc::invalid_argument, {"excludes nodes [], the others [2, 3]"}));
  EXPECT_EQ(a.core.epoch(), 0u);  // the round waits for node 1 with the same list
  Admitted b(3, true);
  EXPECT_TRUE(has(b.core.on_register(100, b.rejoin(0, Kind::grow, {2})).replies.at(0).status, Errc::invalid_argument,
                  {"a grow excludes nobody"}));
}

TEST(OrchestratorEpochs, ANewcomerThatLeavesIsForgottenAndTheJobsEndAnswersTheRest) {
  Admitted a(1, true);
  auto n1 = reg(1, 1, "h:8");
  n1.config.elastic = true;
  n1.newcomer = true;
  auto n2 = n1;
  n2.data_address = "h:9";
  (void)a.core.on_register(80, n1);
  (void)a.core.on_register(90, n2);
  auto left = a.core.on_down(80, "killed");
  EXPECT_TRUE(left.replies.empty());  // nobody to answer: it is gone
  EXPECT_EQ(a.core.newcomers(), 1u);
  auto end = a.core.on_leave(Admitted::key(0));  // the job's last member leaves
  ASSERT_EQ(to(end), (std::vector<Core::NodeKey>{90}));
  EXPECT_TRUE(has(end.replies[0].status, Errc::node_lost, {"ended: every member left"}));
  EXPECT_EQ(a.core.newcomers(), 0u);
  EXPECT_FALSE(a.core.complete());
}

TEST(OrchestratorEpochs, ARevokeIsToldToTheOtherMembersOnceAndOnlyFromTheMemberItself) {
  Admitted a(3);
  const uint64_t c = a.core.collective();
  // Another's ticket, another node id, another collective, a stranger: ignored.
  EXPECT_TRUE(a.core.on_revoke(Admitted::key(1), c, 1, a.topo[0].ticket).revoke_notices.empty());
  EXPECT_TRUE(a.core.on_revoke(Admitted::key(1), c, 0, a.topo[0].ticket).revoke_notices.empty());
  EXPECT_TRUE(a.core.on_revoke(Admitted::key(1), c + 1, 1, a.topo[1].ticket).revoke_notices.empty());
  EXPECT_FALSE(a.core.on_revoke(999, c, 1, a.topo[1].ticket).ignored.empty());
  auto fx = a.core.on_revoke(Admitted::key(1), c, 1, a.topo[1].ticket);
  ASSERT_EQ(fx.revoke_notices.size(), 2u);
  EXPECT_EQ(fx.revoke_notices[0].to, Admitted::key(0));
  EXPECT_EQ(fx.revoke_notices[1].to, Admitted::key(2));
  EXPECT_EQ(fx.revoke_notices[0].by, 1u);
  EXPECT_EQ(fx.revoke_notices[0].collective, c);
  EXPECT_TRUE(a.core.on_revoke(Admitted::key(2), c, 2, a.topo[2].ticket).revoke_notices.empty());  // once
  // The shrink that follows keeps every member; the new epoch may be revoked again.
  (void)a.core.on_register(100, a.rejoin(0, Kind::shrink));
  (void)a.core.on_register(101, a.rejoin(1, Kind::shrink));
  auto formed = a.core.on_register(102, a.rejoin(2, Kind::shrink));
  ASSERT_EQ(to(formed).size(), 3u);
  EXPECT_EQ(a.core.on_revoke(100, c + 1, 0, formed.replies[0].topology.ticket).revoke_notices.size(), 2u);
}

} // namespace
} // namespace chorus
