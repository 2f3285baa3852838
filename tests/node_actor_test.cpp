// The node actor (the global client's control side) message by message, under CAF's deterministic
// scheduler, against a scripted orchestrator: the join and every way it can end (the
// orchestrator's answer, its rejection, no answer by the deadline, a failed request, the
// orchestrator lost first), NodeLost notices (a garbled one included, and what the data plane
// hears of each), and leaving. Every failure the node actor writes itself names the orchestrator's
// address; the orchestrator's own rejections pass as they are.
#include <memory>
#include <optional>
#include <vector>

#include "actors/global_client/node_actor.hpp"
#include "actors/global_client/orchestrator_join.hpp"
#include "caf_deterministic.hpp"
#include "messages/peer_codec.hpp"
#include "status_matchers.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;
using namespace chorus::testing;

using answer_atom = caf::atom_constant<caf::atom("answer")>;
using fail_atom = caf::atom_constant<caf::atom("fail")>;

const std::string kWhere = "127.0.0.1:4000";  // the orchestrator's address, as the node knows it

// An orchestrator that records what it gets and answers a registration when the test says so
// (answer_atom: not part of the orchestrator's interface, so this is an untyped actor that the
// node actor sees through an orchestrator_actor handle).
struct Script {
  std::vector<NodeRegisterData> registers;
  std::vector<NodeLeaveData> leaves;
  std::optional<caf::response_promise> pending;
};

caf::behavior scripted_orchestrator(caf::event_based_actor* self, std::shared_ptr<Script> sc) {
  return {
      [self, sc](register_atom, const Envelope& e) -> caf::result<Envelope> {
        std::string err;
        auto d = decode_node_register(e, err);
        EXPECT_TRUE(d) << err;
        if (d) sc->registers.push_back(*d);
        sc->pending = self->make_response_promise();
        return caf::delegated<Envelope>();
      },
      [sc](answer_atom, Envelope& reply) {
        ASSERT_TRUE(sc->pending);
        sc->pending->deliver(std::move(reply));
        sc->pending.reset();
      },
      [sc](fail_atom, caf::error& err) {
        ASSERT_TRUE(sc->pending);
        sc->pending->deliver(std::move(err));
        sc->pending.reset();
      },
      [sc](node_leave_atom, const Envelope& e) {
        std::string err;
        auto d = decode_node_leave(e, err);
        EXPECT_TRUE(d) << err;
        if (d) sc->leaves.push_back(*d);
      },
  };
}

NodeRegisterData reg() {
  Config c;
  c.num_devices = 2;
  c.num_nodes = 2;
  c.orchestrator_address = kWhere;
  c.node_address = "h:1";
  return {protocol_version(), "s3", c, 2, "h:1", 4, ""};
}

TopologyData topology() {
  TopologyData t;
  t.collective = 3;
  t.node_id = 1;
  t.num_nodes = 2;
  t.total_peers = 3;
  t.nodes = {{1, 0, "h:0", 4}, {2, 1, "h:1", 4}};
  t.token = 7;
  return t;
}

class NodeActor : public CafDeterministic {
 protected:
  NodeActor() {
    orch = caf::actor_cast<orchestrator_actor>(sys.spawn(scripted_orchestrator, script));
    events->on_lost = [this](const NodeLostData& d) { seen_by_callback.push_back(d.node_id); };
    node = sys.spawn(node_actor_impl, orch, kWhere, events);
    run_jobs();
  }
  ~NodeActor() override {
    caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(orch, caf::exit_reason::user_shutdown);
    run_jobs();
  }
  // Starts a join from a small client actor; the answer lands in `answer` once the node actor
  // gives it.
  void join(caf::timespan deadline = caf::timespan{2s}) {
    sys.spawn([this, deadline](caf::event_based_actor* client) {
      client->request(node, 10s, join_atom::value, encode_node_register(reg()), deadline).then([this](Envelope& e) {
        std::string err;
        auto d = decode_node_register_reply(e, err);
        ASSERT_TRUE(d) << err;
        answer = std::move(*d);
      });
    });
    run_jobs();
  }
  void answer_with(Envelope reply) {
    self->send(caf::actor_cast<caf::actor>(orch), answer_atom::value, std::move(reply));
    run_jobs();
  }
  std::shared_ptr<Script> script = std::make_shared<Script>();
  std::shared_ptr<NodeEvents> events = std::make_shared<NodeEvents>();
  std::vector<uint32_t> seen_by_callback;
  orchestrator_actor orch;
  node_actor node;
  std::optional<NodeRegisterReplyData> answer;
};

TEST_F(NodeActor, AJoinIsOneRegisterRequestAndTheOrchestratorsAnswerComesBack) {
  join();
  ASSERT_EQ(script->registers.size(), 1u);
  EXPECT_EQ(script->registers[0].data_address, "h:1");
  EXPECT_EQ(script->registers[0].num_peers, 2u);
  EXPECT_FALSE(answer);
  answer_with(encode_node_register_reply(Status::ok(), topology()));
  ASSERT_TRUE(answer);
  ASSERT_TRUE(answer->status.is_ok()) << answer->status.to_string();
  EXPECT_EQ(answer->topology, topology());
  EXPECT_EQ(script->registers.size(), 1u);  // never sent again
}

TEST_F(NodeActor, ARejectionIsPassedOnAsItIs) {
  join();
  answer_with(encode_node_register_reply({Errc::auth_failed, "wrong secret"}));
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, Status(Errc::auth_failed, "wrong secret"));
}

TEST_F(NodeActor, NoAnswerByTheDeadlineIsATimeoutNamingIt) {
  join(caf::timespan{1500ms});
  EXPECT_FALSE(answer);
  ASSERT_TRUE(fire_next_timer());  // the register request's deadline
  ASSERT_TRUE(answer);
  EXPECT_TRUE(has(answer->status, Errc::timeout,
                  {"the orchestrator at " + kWhere + " did not answer the registration within 1500 ms"}));
  EXPECT_EQ(script->registers.size(), 1u);  // no resend
}

TEST_F(NodeActor, AnOrchestratorLostBeforeItAnswersEndsTheJoinAtOnce) {
  join();
  caf::anon_send_exit(orch, caf::exit_reason::kill);
  run_jobs();
  ASSERT_TRUE(answer);
  EXPECT_TRUE(has(answer->status, Errc::unreachable, {"orchestrator lost: " + kWhere + " went down", "before it answered"}));
  auto lost = events->lost();
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].node_id, NodeEvents::kOrchestrator);
  EXPECT_TRUE(lost[0].reason.rfind("orchestrator lost: " + kWhere + " went down", 0) == 0) << lost[0].reason;
  EXPECT_EQ(seen_by_callback, std::vector<uint32_t>{NodeEvents::kOrchestrator});
}

TEST_F(NodeActor, ASecondJoinWhileTheFirstWaitsIsRefused) {
  join();
  join();
  ASSERT_TRUE(answer);
  EXPECT_TRUE(has(answer->status, Errc::register_twice, {"already joining the orchestrator at " + kWhere}));
  EXPECT_EQ(script->registers.size(), 1u);
}

// A join after the node actor heard of the orchestrator's loss (the connection closed right after
// CAF's handshake): answered at once with that loss, named, and nothing is sent. A remote
// orchestrator that is gone would never bounce the request: it would only time out.
TEST_F(NodeActor, AJoinAfterTheOrchestratorIsGoneIsAnsweredAtOnceWithItsLoss) {
  caf::anon_send_exit(orch, caf::exit_reason::kill);
  run_jobs();
  join();
  ASSERT_TRUE(answer);
  EXPECT_TRUE(has(answer->status, Errc::unreachable,
                  {"orchestrator lost: " + kWhere + " went down", "before it answered the registration"}))
      << answer->status.to_string();
  EXPECT_TRUE(script->registers.empty());
  ASSERT_EQ(events->lost().size(), 1u);  // reported once, by the down message
}

// The register request failing in any other way is an internal error, named too.
TEST_F(NodeActor, ARequestThatFailsOtherwiseIsInternalNamingTheOrchestrator) {
  join();
  self->send(caf::actor_cast<caf::actor>(orch), fail_atom::value, caf::make_error(caf::sec::unexpected_message));
  run_jobs();
  ASSERT_TRUE(answer);
  EXPECT_TRUE(has(answer->status, Errc::internal, {"registration with the orchestrator at " + kWhere + " failed: ",
                                                   "unexpected_message"}))
      << answer->status.to_string();
}

// The node session maps the failure of its own request to the node actor the same way.
TEST(JoinError, TimeoutsLostLinksAndTheRestEachHaveTheirCodeAndNameTheAddress) {
  const auto t = caf::timespan{std::chrono::milliseconds(2500)};
  EXPECT_EQ(join_error(caf::sec::request_timeout, "h:9", t, "x"),
            Status(Errc::timeout, "the orchestrator at h:9 did not answer the registration within 2500 ms"));
  for (auto lost : {caf::sec::request_receiver_down, caf::sec::no_route_to_receiving_node,
                    caf::sec::cannot_connect_to_node, caf::sec::connection_timeout})
    EXPECT_EQ(join_error(lost, "h:9", t, "why"), Status(Errc::unreachable, "the orchestrator at h:9 cannot be reached: why"));
  EXPECT_EQ(join_error(caf::sec::unexpected_message, "h:9", t, "why"),
            Status(Errc::internal, "registration with the orchestrator at h:9 failed: why"));
}

TEST_F(NodeActor, NodeLostNoticesReachTheCallbackInOrder) {
  self->send(node, node_lost_atom::value, encode_node_lost({3, 2, "node lost: killed"}));
  self->send(node, node_lost_atom::value, encode_node_lost({3, 0, "node lost: frozen"}));
  self->send(node, node_lost_atom::value, Envelope{{0xBADULL}});
  run_jobs();
  auto lost = events->lost();
  ASSERT_EQ(lost.size(), 3u);
  EXPECT_EQ(lost[0].node_id, 2u);
  EXPECT_EQ(lost[0].reason, "node lost: killed");
  EXPECT_EQ(lost[1].node_id, 0u);
  EXPECT_EQ(lost[2].node_id, NodeEvents::kGarbledNotice);  // recorded as such, not as a node
  EXPECT_EQ(lost[2].reason.rfind("garbled NodeLost notice from the orchestrator at " + kWhere + " (", 0), 0u)
      << lost[2].reason;
  EXPECT_NE(lost[2].reason.find("a node may be lost, which one is unknown"), std::string::npos) << lost[2].reason;
  EXPECT_EQ(seen_by_callback, (std::vector<uint32_t>{2, 0, NodeEvents::kGarbledNotice}));
}

// A garbled notice means the orchestrator's link is not trusted: a join still waiting fails.
TEST_F(NodeActor, AGarbledNoticeWhileAJoinWaitsEndsTheJoin) {
  join();
  self->send(node, node_lost_atom::value, Envelope{{0xBADULL}});
  run_jobs();
  ASSERT_TRUE(answer);
  EXPECT_TRUE(has(answer->status, Errc::unreachable, {"garbled NodeLost notice from the orchestrator at " + kWhere}))
      << answer->status.to_string();
  ASSERT_EQ(events->lost().size(), 1u);
  EXPECT_EQ(events->lost()[0].node_id, NodeEvents::kGarbledNotice);
}

// What the data plane hears of each event (join_orchestrator passes it to the global client): a
// node's loss and a garbled notice both fail the ops in flight; the orchestrator's own loss does not.
TEST(DataPlaneLoss, ANodesLossAndAGarbledNoticeReachTheDataPlaneTheOrchestratorsLossDoesNot) {
  EXPECT_EQ(data_plane_loss({3, 2, "killed"}), std::optional<std::string>("node 2 lost: killed"));
  EXPECT_EQ(data_plane_loss({0, NodeEvents::kGarbledNotice, "garbled NodeLost notice from ..."}),
            std::optional<std::string>("garbled NodeLost notice from ..."));
  EXPECT_EQ(data_plane_loss({0, NodeEvents::kOrchestrator, "orchestrator lost: h:1 went down"}), std::nullopt);
}

TEST_F(NodeActor, LeavingTellsTheOrchestratorAndStopsTheNodeActor) {
  self->monitor(node);
  self->send(node, node_leave_atom::value, encode_node_leave({3, 1}));
  run_jobs();
  ASSERT_EQ(script->leaves.size(), 1u);
  EXPECT_EQ(script->leaves[0].collective, 3u);
  EXPECT_EQ(script->leaves[0].node_id, 1u);
  bool down = false;
  self->receive([&](caf::down_msg& dm) { down = dm.source == node.address(); },
                caf::after(std::chrono::seconds(0)) >> [] {});
  EXPECT_TRUE(down);
}

} // namespace
} // namespace chorus
