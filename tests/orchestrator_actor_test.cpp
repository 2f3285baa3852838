// The orchestrator actor as production spawns it, message by message, under CAF's deterministic
// scheduler: every request it takes and every reply and notice it sends, with the admission timer
// fired by the test, not by the clock. Fake nodes are small actors that forward what the test tells
// them and record what comes back.
#include <memory>
#include <optional>
#include <vector>

#include "actors/orchestrator/orchestrator.hpp"
#include "actors/unexpected_messages.hpp"
#include "caf_deterministic.hpp"
#include "messages/node_codec.hpp"
#include "messages/peer_codec.hpp"
#include "messages/status_codec.hpp"
#include "status_matchers.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;
using namespace chorus::testing;

// What one fake node got back.
struct NodeLog {
  std::vector<NodeRegisterReplyData> replies;
  std::vector<caf::error> errors;
  std::vector<NodeLostData> lost;
  bool answers_status = true;  // false: a node that never answers a status request
  int status_requests = 0;
};

// A node's side of the protocol: sends what the test hands it (a register request, a leave) to the
// orchestrator and records the answers and notices.
caf::behavior fake_node(caf::event_based_actor* self, orchestrator_actor orch, std::shared_ptr<NodeLog> log) {
  return {
      [=](register_atom, Envelope& e) {
        self->request(orch, 60s, register_atom::value, std::move(e))
            .then(
                [=](Envelope& reply) {
                  std::string err;
                  auto d = decode_node_register_reply(reply, err);
                  ASSERT_TRUE(d) << err;
                  log->replies.push_back(std::move(*d));
                },
                [=](caf::error& err) { log->errors.push_back(std::move(err)); });
      },
      [=](node_leave_atom, Envelope& e) { self->send(orch, node_leave_atom::value, std::move(e)); },
      [=](node_lost_atom, const Envelope& e) {
        std::string err;
        auto d = decode_node_lost(e, err);
        ASSERT_TRUE(d) << err;
        log->lost.push_back(std::move(*d));
      },
      [=](status_atom, const Envelope&) -> caf::result<Envelope> {
        ++log->status_requests;
        if (!log->answers_status) return self->make_response_promise<Envelope>();  // never delivered
        NodeStatusData n;
        n.pid = 77;
        n.peers.push_back({5, true, 0, 3, "barrier", "running", 10, "node 1 (not called yet)", ""});
        return encode_node_status(n);
      },
  };
}

NodeRegisterData reg(uint32_t nodes, uint32_t peers, const std::string& addr, const std::string& secret = "s3") {
  Config c;
  c.num_devices = peers;
  c.num_nodes = nodes;
  c.orchestrator_address = "127.0.0.1:4000";
  c.node_address = addr;
  return {protocol_version(), secret, c, peers, addr, 4};
}

class OrchestratorActor : public CafDeterministic {
 protected:
  void start(uint32_t nodes, std::chrono::milliseconds timeout = 5000ms) {
    orch = sys.spawn(orchestrator, OrchestratorCore::Options{nodes, timeout, [] { return uint64_t{42}; }});
    run_jobs();
  }
  // A fake node and its log.
  std::pair<caf::actor, std::shared_ptr<NodeLog>> node() {
    auto log = std::make_shared<NodeLog>();
    auto a = sys.spawn(fake_node, orch, log);
    run_jobs();
    return {a, log};
  }
  void send_register(const caf::actor& n, const NodeRegisterData& r) {
    self->send(n, register_atom::value, encode_node_register(r));
    run_jobs();
  }
  std::tuple<uint64_t, uint64_t, bool> state() {
    std::tuple<uint64_t, uint64_t, bool> out;
    self->send(orch, caf::get_atom::value);
    run_jobs();
    self->receive([&](uint64_t c, uint64_t r, bool done) { out = {c, r, done}; },
                  caf::after(std::chrono::seconds(0)) >> [] { ADD_FAILURE() << "no answer to get"; });
    return out;
  }
  void TearDown() override {
    caf::anon_send_exit(orch, caf::exit_reason::user_shutdown);
    for (auto& a : spawned) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    run_jobs();
  }
  orchestrator_actor orch;
  std::vector<caf::actor> spawned;
};

TEST_F(OrchestratorActor, AnswersEveryNodeOnceTheLastIsIn) {
  start(2);
  auto [a, la] = node();
  auto [b, lb] = node();
  spawned = {a, b};
  send_register(a, reg(2, 3, "h:1"));
  EXPECT_TRUE(la->replies.empty());  // held until the collective is complete
  EXPECT_EQ(state(), std::make_tuple(uint64_t{1}, uint64_t{1}, false));
  send_register(b, reg(2, 1, "h:2"));
  ASSERT_EQ(la->replies.size(), 1u);
  ASSERT_EQ(lb->replies.size(), 1u);
  for (auto* l : {la.get(), lb.get()}) {
    const auto& r = l->replies[0];
    ASSERT_TRUE(r.status.is_ok()) << r.status.to_string();
    EXPECT_EQ(r.topology.num_nodes, 2u);
    EXPECT_EQ(r.topology.total_peers, 4u);
    EXPECT_EQ(r.topology.token, 42u);
    EXPECT_EQ(r.topology.nodes, (std::vector<NodeEntry>{{3, 0, "h:1", 4, 0}, {1, 3, "h:2", 4, 1}}));
  }
  EXPECT_EQ(la->replies[0].topology.node_id, 0u);
  EXPECT_EQ(lb->replies[0].topology.node_id, 1u);
  EXPECT_EQ(state(), std::make_tuple(uint64_t{1}, uint64_t{2}, true));
}

// A garbled message is answered alone: it proves no node of the job. (A wrong secret never
// reaches the actor: the front door turns it away.)
TEST_F(OrchestratorActor, StrangersAreAnsweredAtOnceAndDoNotDisturbTheOthers) {
  start(2);
  auto [a, la] = node();
  auto [garbled, lg] = node();
  auto [b, lb] = node();
  spawned = {a, garbled, b};
  send_register(a, reg(2, 1, "h:1"));
  self->send(garbled, register_atom::value, Envelope{{0xDEADBEEFULL, 7}});
  run_jobs();
  ASSERT_EQ(lg->replies.size(), 1u);
  EXPECT_TRUE(has(lg->replies[0].status, Errc::invalid_argument, {"garbled"}));
  EXPECT_EQ(lg->replies[0].status.message(), "garbled registration");  // no decoder text, no stack
  EXPECT_TRUE(la->replies.empty());
  EXPECT_EQ(std::get<1>(state()), 1u);  // only the good node holds a place
  send_register(b, reg(2, 2, "h:5"));
  ASSERT_EQ(la->replies.size(), 1u);
  EXPECT_TRUE(la->replies[0].status.is_ok());
  EXPECT_EQ(lb->replies.at(0).topology.node_id, 1u);
}

// A message the orchestrator has no handler for (any client past the door can send one) is
// dropped quietly: counted and logged at trace level, not printed (CAF's default printed one line
// per message), and the actor goes on.
TEST_F(OrchestratorActor, AnUnexpectedMessageIsDroppedQuietly) {
  start(2);
  const uint64_t before = unexpected_messages();
  ::testing::internal::CaptureStdout();
  for (int i = 0; i < 3; ++i) self->send(caf::actor_cast<caf::actor>(orch), std::string("hello"), i);
  run_jobs();
  const std::string printed = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(unexpected_messages(), before + 3);
  EXPECT_EQ(printed.find("unexpected message"), std::string::npos) << printed;
  EXPECT_EQ(state(), std::make_tuple(uint64_t{1}, uint64_t{0}, false)) << "the actor goes on";
}

// A node of the job refused for its build or config ends the waiting nodes' admission at once,
// each told which node was refused and why; the job can then start again.
TEST_F(OrchestratorActor, ARefusedNodeEndsTheAdmissionOfTheWaitingNodes) {
  start(2);
  auto [a, la] = node();
  auto [bad_version, lv] = node();
  auto [bad_config, lc] = node();
  auto [b, lb] = node();
  spawned = {a, bad_version, bad_config, b};
  send_register(a, reg(2, 1, "h:1"));
  auto v = reg(2, 1, "h:3");
  v.protocol_version = protocol_version() + 1;
  send_register(bad_version, v);
  run_jobs();
  ASSERT_EQ(lv->replies.size(), 1u);
  EXPECT_TRUE(has(lv->replies[0].status, Errc::version_mismatch, {"protocol version"}));
  ASSERT_EQ(la->replies.size(), 1u);
  EXPECT_TRUE(has(la->replies[0].status, Errc::version_mismatch, {"the node at h:3 was refused", "protocol version"}));
  EXPECT_EQ(std::get<1>(state()), 0u);
  send_register(a, reg(2, 1, "h:1"));
  auto c = reg(2, 1, "h:4");
  c.config.auto_tree_arity = 5;
  send_register(bad_config, c);
  run_jobs();
  ASSERT_EQ(lc->replies.size(), 1u);
  EXPECT_TRUE(has(lc->replies[0].status, Errc::config_mismatch, {"auto_tree_arity (5 vs 2)"}));
  ASSERT_EQ(la->replies.size(), 2u);
  EXPECT_TRUE(has(la->replies[1].status, Errc::config_mismatch, {"the node at h:4 was refused", "auto_tree_arity (5 vs 2)"}));
  send_register(a, reg(2, 1, "h:1"));
  send_register(b, reg(2, 2, "h:5"));
  ASSERT_EQ(la->replies.size(), 3u);
  EXPECT_TRUE(la->replies[2].status.is_ok()) << la->replies[2].status.to_string();
  EXPECT_EQ(lb->replies.at(0).topology.node_id, 1u);
}

TEST_F(OrchestratorActor, ARepeatIsSupersededWhilePendingAndAnsweredAgainAfterwards) {
  start(2);
  auto [a, la] = node();
  auto [b, lb] = node();
  spawned = {a, b};
  send_register(a, reg(2, 1, "h:1"));
  send_register(a, reg(2, 1, "h:1"));
  ASSERT_EQ(la->replies.size(), 1u);
  EXPECT_TRUE(has(la->replies[0].status, Errc::register_twice, {kSuperseded}));
  send_register(b, reg(2, 1, "h:2"));
  ASSERT_EQ(la->replies.size(), 2u);  // the first request's answer
  EXPECT_TRUE(la->replies[1].status.is_ok());
  send_register(a, reg(2, 1, "h:1"));
  ASSERT_EQ(la->replies.size(), 3u);
  EXPECT_EQ(la->replies[2].topology, la->replies[1].topology);
}

TEST_F(OrchestratorActor, TheAdmissionTimerFailsEveryWaitingNode) {
  start(3, 1500ms);
  auto [a, la] = node();
  auto [b, lb] = node();
  spawned = {a, b};
  send_register(a, reg(3, 1, "h:1"));
  send_register(b, reg(3, 1, "h:2"));
  EXPECT_TRUE(la->replies.empty());
  ASSERT_TRUE(fire_next_timer());
  for (auto* l : {la.get(), lb.get()}) {
    ASSERT_EQ(l->replies.size(), 1u);
    EXPECT_TRUE(has(l->replies[0].status, Errc::timeout, {"only 2 of 3 nodes", "1500 ms"}));
  }
  EXPECT_EQ(std::get<1>(state()), 0u);
}

TEST_F(OrchestratorActor, ATimeoutFromAnyoneButItselfIsIgnored) {
  start(2);
  auto [a, la] = node();
  auto [b, lb] = node();
  spawned = {a, b};
  send_register(a, reg(2, 1, "h:1"));
  // The core's first timer has id 1: a stranger that guesses it must not end the admission.
  for (uint64_t id = 0; id < 4; ++id) self->send(orch, timeout_atom::value, id);
  run_jobs();
  EXPECT_TRUE(la->replies.empty());
  EXPECT_EQ(std::get<1>(state()), 1u);
  send_register(b, reg(2, 1, "h:2"));
  ASSERT_EQ(la->replies.size(), 1u);
  EXPECT_TRUE(la->replies[0].status.is_ok());
}

TEST_F(OrchestratorActor, ALostNodeIsNamedToEverySurvivor) {
  start(3);
  auto [a, la] = node();
  auto [b, lb] = node();
  auto [c, lc] = node();
  spawned = {a, c};
  send_register(a, reg(3, 1, "h:1"));
  send_register(b, reg(3, 1, "h:2"));
  send_register(c, reg(3, 1, "h:3"));
  ASSERT_TRUE(std::get<2>(state()));
  caf::anon_send_exit(b, caf::exit_reason::kill);  // the orchestrator monitors every member
  run_jobs();
  for (auto* l : {la.get(), lc.get()}) {
    ASSERT_EQ(l->lost.size(), 1u);
    EXPECT_EQ(l->lost[0].node_id, 1u);
    EXPECT_NE(l->lost[0].reason.find("its actor went down ("), std::string::npos) << l->lost[0].reason;
  }
  EXPECT_TRUE(lb->lost.empty());
}

TEST_F(OrchestratorActor, NodesThatLeaveOpenTheNextCollective) {
  start(2);
  auto [a, la] = node();
  auto [b, lb] = node();
  spawned = {a, b};
  send_register(a, reg(2, 1, "h:1"));
  send_register(b, reg(2, 1, "h:2"));
  const auto collective = la->replies.at(0).topology.collective;
  self->send(a, node_leave_atom::value, encode_node_leave({collective, 0}));
  self->send(b, node_leave_atom::value, encode_node_leave({collective, 1}));
  run_jobs();
  EXPECT_TRUE(la->lost.empty());  // leaving is no loss
  EXPECT_EQ(state(), std::make_tuple(collective + 1, uint64_t{0}, false));
  send_register(a, reg(2, 2, "h:1"));
  send_register(b, reg(2, 2, "h:2"));
  ASSERT_EQ(la->replies.size(), 2u);
  EXPECT_EQ(la->replies[1].topology.collective, collective + 1);
  EXPECT_EQ(la->replies[1].topology.total_peers, 4u);
}

// chorus-ctl's status request: every member node is asked; one that does not answer within
// kStatusWait is named as silent, and a garbled request is refused without asking anyone.
TEST_F(OrchestratorActor, StatusGathersEveryMemberAndNamesTheSilentOnes) {
  start(2);
  auto [a, la] = node();
  auto [b, lb] = node();
  spawned = {a, b};
  lb->answers_status = false;
  send_register(a, reg(2, 1, "h:1"));
  send_register(b, reg(2, 1, "h:2"));
  self->send(orch, status_atom::value, Envelope{{0xDEADBEEFULL, 7}});
  run_jobs();
  std::optional<JobStatusData> refused;
  self->receive(
      [&](Envelope& e) {
        std::string err;
        refused = decode_job_status(e, err);
      },
      caf::after(std::chrono::seconds(0)) >> [] {});
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status.code(), Errc::invalid_argument);
  EXPECT_EQ(la->status_requests + lb->status_requests, 0) << "refused before asking any node";
  self->send(orch, status_atom::value, encode_status_request({}));
  run_jobs();
  EXPECT_EQ(la->status_requests, 1);
  EXPECT_EQ(lb->status_requests, 1);
  // Node 1's answer is awaited with a timeout: the clock moves timer by timer (the admission's
  // own timer may come first) until the job status comes.
  std::optional<JobStatusData> job;
  auto take = [&] {
    self->receive(
        [&](Envelope& e) {
          std::string err;
          job = decode_job_status(e, err);
        },
        caf::after(std::chrono::seconds(0)) >> [] {});
  };
  take();
  EXPECT_FALSE(job) << "answered before node 1 timed out";
  for (int i = 0; i < 5 && !job && fire_next_timer(); ++i) take();
  ASSERT_TRUE(job) << "no job status";
  ASSERT_TRUE(job->status.is_ok()) << job->status.to_string();
  EXPECT_EQ(job->registered_nodes, 2u);
  EXPECT_TRUE(job->complete);
  ASSERT_EQ(job->nodes.size(), 1u);
  EXPECT_EQ(job->nodes[0].pid, 77);
  EXPECT_EQ(job->silent, std::vector<uint32_t>{1});
  EXPECT_NE(job_status_report(*job).find("node 1: did not answer"), std::string::npos);
}

} // namespace
} // namespace chorus
