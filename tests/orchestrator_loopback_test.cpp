// The orchestrator over real CAF remoting on loopback: an orchestrator published on an ephemeral
// port, nodes in their own actor systems joining it, node loss, a wrong secret, a config mismatch
// over the wire, and an orchestrator that cannot be reached.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "actors/global_client/node_session.hpp"
#include "actors/orchestrator/orchestrator.hpp"
#include "actors/orchestrator/published.hpp"
#include "orchestrator_fixtures.hpp"
#include "status_matchers.hpp"
#include "test_events.hpp"

namespace chorus {
namespace {

using Core = OrchestratorCore;
using namespace std::chrono_literals;
using namespace chorus::testing;

std::unique_ptr<System> make_system() { return std::make_unique<System>(); }

class Loopback : public ::testing::Test {
 protected:
  void start(uint32_t nodes, std::chrono::milliseconds timeout = 3000ms) {
    orch_sys_ = make_system();
    orch_ = orch_sys_->sys->spawn(orchestrator, Core::Options{nodes, timeout, {}});
    auto p = PublishedOrchestrator::publish(*orch_sys_->sys, orch_, {"127.0.0.1", 0, "s3", 2000ms});
    ASSERT_TRUE(p) << p.status().to_string();
    published_ = std::move(*p);
    port_ = published_->port();
    ASSERT_NE(port_, 0);
  }
  void TearDown() override {
    sessions_.clear();
    node_sys_.clear();
    published_.reset();
    if (orch_sys_) {
      caf::anon_send_exit(orch_, caf::exit_reason::user_shutdown);
      orch_ = nullptr;
      orch_sys_.reset();
    }
  }
  // Asks the orchestrator for its state (get_atom: collective, registered nodes, complete) until
  // `want` holds for it, or 3 s pass. A poll: the orchestrator announces neither a registration
  // (a node hears back only once every node is in) nor its return to idle (a node's leave reaches
  // it through the node's own connection, in no order with this request), so asking is the only
  // way to tell.
  template <class Want>
  bool wait_state(Want want) {
    caf::scoped_actor self{*orch_sys_->sys};
    auto deadline = std::chrono::steady_clock::now() + 3s;
    while (std::chrono::steady_clock::now() < deadline) {
      bool done = false;
      self->request(orch_, 1s, caf::get_atom::value)
          .receive([&](uint64_t collective, uint64_t registered, bool complete) {
                     done = want(collective, registered, complete);
                   },
                   [&](caf::error&) {});
      if (done) return true;
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }
  // Until the current collective has no node left.
  bool wait_idle(uint64_t after_collective) {
    return wait_state([&](uint64_t collective, uint64_t registered, bool complete) {
      return collective > after_collective && registered == 0 && !complete;
    });
  }
  // Joins n nodes concurrently (each waits for the others); returns each node's outcome. Node i's
  // NodeLost notices raise lost_[i].
  std::vector<Result<std::shared_ptr<NodeSession>>> join_all(const std::vector<NodeRegisterData>& regs,
                                                              std::chrono::milliseconds limit = 3000ms) {
    std::vector<Result<std::shared_ptr<NodeSession>>> out(regs.size(), Status(Errc::internal, "not run"));
    while (node_sys_.size() < regs.size()) node_sys_.push_back(make_system());
    while (lost_.size() < regs.size()) lost_.push_back(std::make_unique<EventCount>());
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < regs.size(); ++i)
      threads.emplace_back([&, i] {
        EventCount* lost = lost_[i].get();
        out[i] = NodeSession::join(*node_sys_[i]->sys, "127.0.0.1", port_, regs[i], limit,
                                   [lost](const NodeLostData&) { lost->raise(); });
      });
    for (auto& t : threads) t.join();
    for (auto& r : out)
      if (r) sessions_.push_back(*r);
    return out;
  }

  std::unique_ptr<System> orch_sys_;
  orchestrator_actor orch_;
  std::unique_ptr<PublishedOrchestrator> published_;  // behind its front door, as the daemon does
  uint16_t port_ = 0;
  // By node index of join_all; declared before the systems, whose node actors call them.
  std::vector<std::unique_ptr<EventCount>> lost_;
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
  ASSERT_TRUE(lost_[0]->wait_for(1, 3s) && lost_[2]->wait_for(1, 3s));
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
  start(2, 20000ms);
  auto bad = reg(2, 1, "127.0.0.1:7002");
  bad.config.auto_threshold_bytes = 1;
  std::vector<Result<std::shared_ptr<NodeSession>>> out;
  std::chrono::steady_clock::time_point first_ended;
  // Register the good node first so the mismatching one is the second.
  std::thread first([&] {
    out = join_all({reg(2, 1, "127.0.0.1:7001")}, 20000ms);
    first_ended = std::chrono::steady_clock::now();
  });
  EXPECT_TRUE(wait_state([](uint64_t, uint64_t registered, bool) { return registered == 1; }));
  auto sys = make_system();
  auto r = NodeSession::join(*sys->sys, "127.0.0.1", port_, bad, 2000ms);
  const auto refused = std::chrono::steady_clock::now();
  EXPECT_TRUE(has(r.status(), Errc::config_mismatch, {"auto_threshold_bytes (1 vs"}));
  first.join();
  // The good node hears of it at once (not at its 20 s limit), naming the refused node and why.
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(has(out[0].status(), Errc::config_mismatch,
                  {"the node at 127.0.0.1:7002 was refused", "auto_threshold_bytes (1 vs"}));
  EXPECT_LT(first_ended - refused, 2000ms);
}

TEST_F(Loopback, UnreachableOrchestratorIsAnError) {
  auto sys = make_system();
  auto r = NodeSession::join(*sys->sys, "127.0.0.1", 1, reg(1, 1, "127.0.0.1:7001"), 500ms);
  EXPECT_TRUE(has(r.status(), Errc::unreachable, {"cannot reach"}));
}


} // namespace
} // namespace chorus
