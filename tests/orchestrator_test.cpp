// The orchestrator: every admission rule on the pure core, the message codecs, and the real thing
// over CAF remoting on loopback (an orchestrator published on an ephemeral port, nodes in their own
// actor systems). The chorus-orchestrator daemon as a process: orchestrator_daemon_test.cpp.
#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "actors/global_client/node_session.hpp"
#include "actors/orchestrator/orchestrator.hpp"
#include "messages/peer_codec.hpp"
#include "orchestrator_fixtures.hpp"
#include "status_matchers.hpp"

namespace chorus {
namespace {

using Core = OrchestratorCore;
using namespace std::chrono_literals;
using namespace chorus::testing;

Core make_core(uint32_t nodes = 3) { return Core({nodes, "s3", 1000ms, {}}); }

// ---- Codecs ----

TEST(OrchestratorCodec, RegisterRoundTrips) {
  auto r = reg(3, 2, "10.0.0.1:5000");
  r.config.auto_tree_arity = 5;
  r.config.global[2] = StrategyChoice{};
  std::string error;
  auto d = decode_node_register(encode_node_register(r), error);
  ASSERT_TRUE(d) << error;
  EXPECT_EQ(d->protocol_version, r.protocol_version);
  EXPECT_EQ(d->secret, "s3");
  EXPECT_EQ(d->num_peers, 2u);
  EXPECT_EQ(d->data_address, "10.0.0.1:5000");
  EXPECT_EQ(d->config.first_difference(r.config), "");
}

TEST(OrchestratorCodec, ReplyLeaveLostRoundTrip) {
  TopologyData t{7, 1, 2, 5, {{2, 0, "a:1"}, {3, 2, "b:2"}}};
  std::string error;
  auto ok = decode_node_register_reply(encode_node_register_reply(Status::ok(), t), error);
  ASSERT_TRUE(ok) << error;
  EXPECT_TRUE(ok->status.is_ok());
  EXPECT_EQ(ok->topology, t);
  auto bad = decode_node_register_reply(encode_node_register_reply({Errc::config_mismatch, "x (1 vs 2)"}), error);
  ASSERT_TRUE(bad);
  EXPECT_TRUE(has(bad->status, Errc::config_mismatch, {"x (1 vs 2)"}));
  auto l = decode_node_leave(encode_node_leave({4, 2}), error);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->collective, 4u);
  EXPECT_EQ(l->node_id, 2u);
  auto lost = decode_node_lost(encode_node_lost({4, 1, "gone"}), error);
  ASSERT_TRUE(lost);
  EXPECT_EQ(lost->node_id, 1u);
  EXPECT_EQ(lost->reason, "gone");
}

TEST(OrchestratorCodec, GarbledInputIsAnErrorNotACrash) {
  std::string error;
  EXPECT_FALSE(decode_node_register(Envelope{{0xffffffffffffffffull, 1, 2}}, error));
  EXPECT_NE(error.find("garbled"), std::string::npos) << error;
  error.clear();
  EXPECT_FALSE(decode_node_register(Envelope{}, error));
  EXPECT_FALSE(error.empty());
  // A topology whose node list disagrees with its node count.
  TopologyData t{1, 5, 2, 1, {{1, 0, "a:1"}}};
  EXPECT_FALSE(decode_node_register_reply(encode_node_register_reply(Status::ok(), t), error));
}

// ---- Core rules ----

TEST(OrchestratorCore, AdmitsInArrivalOrderWithUnevenPeers) {
  auto core = make_core(3);
  auto a = core.on_register(10, reg(3, 1, "h:1"));
  EXPECT_TRUE(a.replies.empty());
  EXPECT_EQ(a.watch, (std::vector<Core::NodeKey>{10}));
  ASSERT_TRUE(a.timer);  // the admission deadline starts with the first node
  EXPECT_EQ(a.timer->second, 1000ms);
  auto b = core.on_register(20, reg(3, 3, "h:2"));
  EXPECT_TRUE(b.replies.empty());
  EXPECT_FALSE(b.timer);
  EXPECT_FALSE(core.complete());
  auto c = core.on_register(30, reg(3, 2, "h:3"));
  EXPECT_TRUE(core.complete());
  ASSERT_EQ(c.replies.size(), 3u);
  std::vector<NodeEntry> nodes{{1, 0, "h:1"}, {3, 1, "h:2"}, {2, 4, "h:3"}};
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

TEST(OrchestratorCore, RejectsWrongVersionAndSecretWithoutDisturbingOthers) {
  auto core = make_core(2);
  (void)core.on_register(1, reg(2, 1, "h:1"));
  auto v = reg(2, 1, "h:2");
  v.protocol_version = protocol_version() + 1;
  auto fx = core.on_register(2, v);
  ASSERT_EQ(fx.replies.size(), 1u);
  EXPECT_EQ(fx.replies[0].to, 2u);
  EXPECT_TRUE(has(fx.replies[0].status, Errc::version_mismatch, {"protocol version", std::to_string(protocol_version())}));
  EXPECT_TRUE(fx.watch.empty());
  fx = core.on_register(3, reg(2, 1, "h:3", "guess"));
  ASSERT_EQ(fx.replies.size(), 1u);
  EXPECT_TRUE(has(fx.replies[0].status, Errc::auth_failed, {"wrong secret"}));
  EXPECT_EQ(fx.replies[0].status.message().find("s3"), std::string::npos);  // never echo the secret
  EXPECT_EQ(core.registered(), 1u);
  EXPECT_FALSE(core.is_member(3));
  fx = core.on_register(4, reg(2, 1, "h:4"));
  ASSERT_EQ(fx.replies.size(), 2u);
  EXPECT_EQ(fx.replies[1].topology.node_id, 1u);
}

TEST(OrchestratorCore, ConfigMismatchNamesTheField) {
  auto core = make_core(3);
  (void)core.on_register(1, reg(3, 2, "h:1"));
  auto r = reg(3, 4, "h:2");  // other peer count and address: allowed
  r.config.orchestrator_address = "orch.example:4000";  // another name for the orchestrator: allowed
  EXPECT_TRUE(core.on_register(2, r).replies.empty());
  auto bad = reg(3, 1, "h:3");
  bad.config.auto_tree_arity = 4;
  auto fx = core.on_register(3, bad);
  ASSERT_EQ(fx.replies.size(), 1u);
  EXPECT_TRUE(has(fx.replies[0].status, Errc::config_mismatch, {"auto_tree_arity (4 vs 2)"}));
  bad = reg(3, 1, "h:3");
  bad.config.global[0] = StrategyChoice{false, {Algorithm::ring, 2}};
  fx = core.on_register(3, bad);
  EXPECT_TRUE(has(fx.replies[0].status, Errc::config_mismatch, {"global strategy for all_reduce"}));
  bad = reg(3, 1, "h:3");
  bad.config.timeout = 5ms;
  EXPECT_TRUE(has(core.on_register(3, bad).replies[0].status, Errc::config_mismatch, {"timeout_ms (5 vs"}));
  EXPECT_EQ(core.registered(), 2u);
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
  r = reg(2, 1, "");
  r.config.node_address = "h:1";
  EXPECT_TRUE(has(core.on_register(1, r).replies.at(0).status, Errc::invalid_argument, {"data_address"}));
  ASSERT_TRUE(core.on_register(1, reg(2, 1, "h:1")).replies.empty());
  EXPECT_TRUE(has(core.on_register(1, reg(2, 1, "h:9")).replies.at(0).status, Errc::register_twice, {}));
  EXPECT_TRUE(has(core.on_register(2, reg(2, 1, "h:1")).replies.at(0).status, Errc::invalid_argument,
                  {"h:1", "already used"}));
  EXPECT_TRUE(has(core.on_garbled(3, "garbled message: x").replies.at(0).status, Errc::invalid_argument,
                  {"garbled"}));
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
            (std::vector<NodeEntry>{{2, 0, "h:2"}, {1, 2, "h:1"}, {3, 3, "h:5"}}));
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

// ---- Real CAF remoting on loopback ----

std::unique_ptr<System> make_system() { return std::make_unique<System>(); }

class Loopback : public ::testing::Test {
 protected:
  void start(uint32_t nodes, std::chrono::milliseconds timeout = 3000ms) {
    orch_sys_ = make_system();
    orch_ = orch_sys_->sys->spawn(orchestrator, Core::Options{nodes, "s3", timeout, {}});
    auto p = orch_sys_->sys->middleman().publish(orch_, 0, "127.0.0.1", true);
    ASSERT_TRUE(p) << orch_sys_->sys->render(p.error());
    port_ = *p;
    ASSERT_NE(port_, 0);
  }
  void TearDown() override {
    sessions_.clear();
    node_sys_.clear();
    if (orch_sys_) {
      caf::anon_send_exit(orch_, caf::exit_reason::user_shutdown);
      orch_ = nullptr;
      orch_sys_.reset();
    }
  }
  // Polls the orchestrator until the current collective has no node left (or 3 s pass).
  bool wait_idle(uint64_t after_collective) {
    caf::scoped_actor self{*orch_sys_->sys};
    auto deadline = std::chrono::steady_clock::now() + 3s;
    while (std::chrono::steady_clock::now() < deadline) {
      bool idle = false;
      self->request(orch_, 1s, caf::get_atom::value)
          .receive([&](uint64_t collective, uint64_t registered, bool complete) {
                     idle = collective > after_collective && registered == 0 && !complete;
                   },
                   [&](caf::error&) {});
      if (idle) return true;
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }
  // Joins n nodes concurrently (each waits for the others); returns each node's outcome.
  std::vector<Result<std::shared_ptr<NodeSession>>> join_all(const std::vector<NodeRegisterData>& regs) {
    std::vector<Result<std::shared_ptr<NodeSession>>> out(regs.size(), Status(Errc::internal, "not run"));
    while (node_sys_.size() < regs.size()) node_sys_.push_back(make_system());
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < regs.size(); ++i)
      threads.emplace_back([&, i] {
        out[i] = NodeSession::join(*node_sys_[i]->sys, "127.0.0.1", port_, regs[i], 3000ms);
      });
    for (auto& t : threads) t.join();
    for (auto& r : out)
      if (r) sessions_.push_back(*r);
    return out;
  }

  std::unique_ptr<System> orch_sys_;
  orchestrator_actor orch_;
  uint16_t port_ = 0;
  std::vector<std::unique_ptr<System>> node_sys_;
  std::vector<std::shared_ptr<NodeSession>> sessions_;
};

TEST_F(Loopback, ThreeNodesGetTheTopologyThenLossIsReported) {
  start(3);
  auto out = join_all({reg(3, 2, "127.0.0.1:7001"), reg(3, 1, "127.0.0.1:7002"), reg(3, 3, "127.0.0.1:7003")});
  ASSERT_EQ(out.size(), 3u);
  std::vector<bool> seen(3, false);
  for (auto& r : out) {
    ASSERT_TRUE(r) << r.status().to_string();
    const auto& t = (*r)->topology();
    EXPECT_EQ(t.num_nodes, 3u);
    EXPECT_EQ(t.total_peers, 6u);
    ASSERT_EQ(t.nodes.size(), 3u);
    ASSERT_LT(t.node_id, 3u);
    seen[t.node_id] = true;
    // Ids follow arrival order, which the threads race for: check the offsets are consistent.
    uint32_t offset = 0;
    for (const auto& n : t.nodes) {
      EXPECT_EQ(n.peer_offset, offset);
      offset += n.num_peers;
    }
    EXPECT_EQ(t.nodes[t.node_id].num_peers, (*r)->topology().nodes[t.node_id].num_peers);
  }
  EXPECT_EQ(seen, (std::vector<bool>{true, true, true}));
  for (auto& r : out) {  // every node sees the same table, and its own entry is its own
    EXPECT_EQ((*r)->topology().nodes, (*out[0])->topology().nodes);
    const auto& me = (*r)->topology().nodes[(*r)->topology().node_id];
    auto idx = me.data_address.back() - '1';
    EXPECT_EQ(me.num_peers, (std::vector<uint32_t>{2, 1, 3})[idx]);
  }
  // Kill the node actor of one node (no leave): the others hear that it was lost, naming it.
  auto victim = (*out[1])->topology().node_id;
  caf::anon_send_exit((*out[1])->actor(), caf::exit_reason::kill);
  auto deadline = std::chrono::steady_clock::now() + 3s;
  bool reported = false;
  while (!reported && std::chrono::steady_clock::now() < deadline) {
    reported = !(*out[0])->lost().empty() && !(*out[2])->lost().empty();
    if (!reported) std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(reported);
  EXPECT_EQ((*out[0])->lost()[0].node_id, victim);
  EXPECT_EQ((*out[2])->lost()[0].node_id, victim);
  EXPECT_TRUE((*out[1])->lost().empty());
}

TEST_F(Loopback, WrongSecretIsRejectedAndNextCollectiveWorks) {
  start(2);
  auto t0 = std::chrono::steady_clock::now();
  auto bad = join_all({reg(2, 1, "127.0.0.1:7001", "wrong")});
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_TRUE(has(bad[0].status(), Errc::auth_failed, {"wrong secret"}));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);  // at once, not at the deadline
  auto good = join_all({reg(2, 1, "127.0.0.1:7001"), reg(2, 2, "127.0.0.1:7002")});
  ASSERT_TRUE(good[0]) << good[0].status().to_string();
  ASSERT_TRUE(good[1]) << good[1].status().to_string();
  auto collective = (*good[0])->topology().collective;
  EXPECT_EQ((*good[1])->topology().total_peers, 3u);
  // Both leave; the orchestrator then serves the next collective.
  (*good[0])->leave();
  (*good[1])->leave();
  ASSERT_TRUE(wait_idle(collective));
  auto again = join_all({reg(2, 1, "127.0.0.1:7011"), reg(2, 1, "127.0.0.1:7012")});
  ASSERT_TRUE(again[0]) << again[0].status().to_string();
  ASSERT_TRUE(again[1]) << again[1].status().to_string();
  EXPECT_GT((*again[0])->topology().collective, collective);
}

TEST_F(Loopback, ConfigMismatchOverTheWireNamesTheField) {
  start(2, 1000ms);
  auto bad = reg(2, 1, "127.0.0.1:7002");
  bad.config.auto_threshold_bytes = 1;
  std::vector<Result<std::shared_ptr<NodeSession>>> out;
  // Register the good node first so the mismatching one is the second.
  std::thread first([&] {
    out = join_all({reg(2, 1, "127.0.0.1:7001")});
  });
  std::this_thread::sleep_for(300ms);
  auto sys = make_system();
  auto r = NodeSession::join(*sys->sys, "127.0.0.1", port_, bad, 2000ms);
  EXPECT_TRUE(has(r.status(), Errc::config_mismatch, {"auto_threshold_bytes (1 vs"}));
  first.join();  // the good node alone times out at the orchestrator's admission deadline
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(has(out[0].status(), Errc::timeout, {"only 1 of 2"}));
}

TEST_F(Loopback, UnreachableOrchestratorIsAnError) {
  auto sys = make_system();
  auto r = NodeSession::join(*sys->sys, "127.0.0.1", 1, reg(1, 1, "127.0.0.1:7001"), 500ms);
  EXPECT_TRUE(has(r.status(), Errc::unreachable, {"cannot reach"}));
}

} // namespace
} // namespace chorus
