// The local server actor as the runtime spawns it (the same behavior; here under CAF's
// deterministic scheduler instead of on a thread of its own), message by message: every control
// message it takes and every answer it gives, each checked before and after the actor runs. Ops go
// straight into the shared core, as peer threads send them, and the waiter expires its own request,
// as RuntimeImpl::await_op does: the actor arms no timer.
#include <thread>

#include "actors/local_server/local_server.hpp"
#include "caf_deterministic.hpp"
#include "local_server_fixtures.hpp"
#include "strategies/work_buffer.hpp"

namespace chorus {
namespace {

using namespace chorus::testing;

// Runs every peer's part of a planned op on threads of its own (the plans rendezvous in memory).
void execute_all(const std::vector<std::shared_ptr<Reply>>& replies, std::vector<std::vector<float>>& in,
                 std::vector<std::vector<float>>& out) {
  std::vector<std::thread> threads;
  std::vector<Status> st(replies.size());
  for (std::size_t p = 0; p < replies.size(); ++p)
    threads.emplace_back([&, p] {
      OpPlan& plan = *replies[p]->plan;
      WorkBuffer w = WorkBuffer::bind(plan.kind(), replies[p]->rank, plan.size(), plan.root(), plan.count(),
                                      plan.dtype(), reinterpret_cast<const std::byte*>(in[p].data()),
                                      reinterpret_cast<std::byte*>(out[p].data()));
      st[p] = plan.run(replies[p]->rank, w);
    });
  for (auto& t : threads) t.join();
  for (auto& s : st) EXPECT_TRUE(s.is_ok()) << s.to_string();
}

class LocalServerActor : public CafDeterministic {
 protected:
  LocalServerActor() {
    g_epoch = 0;
    server = sys.spawn(local_server, core);
    run_jobs();
  }
  ~LocalServerActor() override {
    caf::anon_send_exit(server, caf::exit_reason::user_shutdown);
    run_jobs();
  }
  // Sends a control message and lets the actor take it; the answer is in the reply slot by then
  // (and not before: nothing runs until the scheduler is told to).
  template <class Atom>
  Status control(Atom atom, Call call) {
    auto r = call.reply;
    self->send(server, atom, std::move(call));
    EXPECT_FALSE(is_done(*r)) << "answered before the actor ran";
    run_jobs();
    EXPECT_TRUE(is_done(*r)) << "the actor did not answer";
    note_epoch(*r);
    return r->status;
  }
  void reg_all(const Config& c) {
    for (uint32_t p = 0; p < c.num_devices; ++p) ASSERT_TRUE(control(register_atom::value, register_call(p, c)).is_ok());
  }
  // An op request as a peer thread sends it: into the core, no mailbox.
  std::shared_ptr<Reply> op(const OpRequestData& r) {
    Call call = op_call(r);
    auto reply = call.reply;
    core->on_op(std::move(call));
    return reply;
  }
  // A real all_reduce (sum of f32) over n peers with sequence number `seq`, executed end to end.
  void expect_all_reduce_works(uint32_t n, uint64_t seq) {
    std::vector<std::shared_ptr<Reply>> replies;
    for (uint32_t p = 0; p < n; ++p) replies.push_back(op(all_reduce_req(p, seq)));
    for (auto& r : replies) {
      ASSERT_TRUE(is_done(*r));
      ASSERT_TRUE(r->status.is_ok()) << r->status.to_string();
    }
    std::vector<std::vector<float>> in(n), out(n, std::vector<float>(4));
    for (uint32_t p = 0; p < n; ++p) in[p] = {float(p), 1.f, 2.f * p, -1.f};
    execute_all(replies, in, out);
    const float s = n * (n - 1) / 2.f;
    for (uint32_t p = 0; p < n; ++p) EXPECT_EQ(out[p], (std::vector<float>{s, float(n), 2 * s, -float(n)})) << p;
  }

  std::shared_ptr<LocalServerCore> core = std::make_shared<LocalServerCore>();
  local_server_actor server;
};

TEST_F(LocalServerActor, RegisterThroughTheActorThenOpsStraightIntoTheCore) {
  reg_all(cfg(3, 10000));  // plans run on loaded machines: a deadline far beyond them
  EXPECT_FALSE(sched.has_job());  // an op is no message
  expect_all_reduce_works(3, 0);
  expect_all_reduce_works(3, 1);
  EXPECT_FALSE(sched.has_job());
}

TEST_F(LocalServerActor, EveryRegisterErrorIsAnsweredThroughTheReplySlot) {
  EXPECT_TRUE(has(control(register_atom::value, register_call(0, cfg(0))), Errc::invalid_config, {"num_devices"}));
  ASSERT_TRUE(control(register_atom::value, register_call(0, cfg(2, 10000))).is_ok());
  EXPECT_TRUE(has(control(register_atom::value, register_call(1, cfg(4))), Errc::config_mismatch,
                  {"peer 1", "num_devices (2 vs 4)"}));
  EXPECT_TRUE(has(control(register_atom::value, register_call(1, cfg(2, 200, "tree:3"))), Errc::config_mismatch,
                  {"peer 1", "auto vs tree:3"}));
  EXPECT_TRUE(has(control(register_atom::value, register_call(2, cfg(2, 10000))), Errc::invalid_argument, {"peer id 2", "[0, 2)"}));
  EXPECT_TRUE(has(control(register_atom::value, register_call(0, cfg(2, 10000))), Errc::register_twice, {"peer 0"}));
  EXPECT_TRUE(has(control(register_atom::value, register_call(1, cfg(2), protocol_version() + 1)), Errc::invalid_argument,
                  {"peer 1", "protocol " + std::to_string(protocol_version() + 1)}));
  ASSERT_TRUE(control(register_atom::value, register_call(1, cfg(2, 10000))).is_ok());
  expect_all_reduce_works(2, 0);
}

TEST_F(LocalServerActor, GarbledControlMessagesAreAnsweredAndTheServerLivesOn) {
  for (int which = 0; which < 3; ++which) {
    Call junk;
    junk.message.words = {0xDEADBEEFDEADBEEFULL, 0x0123456789ABCDEFULL};
    Status s = which == 0   ? control(register_atom::value, std::move(junk))
               : which == 1 ? control(finish_atom::value, std::move(junk))
                            : control(reset_atom::value, std::move(junk));
    EXPECT_TRUE(has(s, Errc::invalid_argument, {"garbled message"})) << which;
  }
  EXPECT_TRUE(has(control(register_atom::value, Call{}), Errc::invalid_argument, {"garbled message", "empty"}));
  reg_all(cfg(2, 10000));
  expect_all_reduce_works(2, 0);
}

TEST_F(LocalServerActor, FinishTwiceBeforeRegisteringAndAfterEveryoneFinished) {
  EXPECT_TRUE(has(control(finish_atom::value, finish_call(0)), Errc::not_registered, {"peer 0", "before registering"}));
  reg_all(cfg(2, 10000));
  ASSERT_TRUE(control(finish_atom::value, finish_call(0)).is_ok());
  EXPECT_TRUE(has(control(finish_atom::value, finish_call(0)), Errc::unregister_twice, {"peer 0 finished twice"}));
  EXPECT_TRUE(has(op(all_reduce_req(0, 0))->status, Errc::finished, {"peer 0"}));
  ASSERT_TRUE(control(finish_atom::value, finish_call(1)).is_ok());
  // Everyone finished: a new collective may start.
  reg_all(cfg(2, 10000));
  expect_all_reduce_works(2, 0);
}

TEST_F(LocalServerActor, AResetFailsWhatWaitsInTheCoreAndOldHandlesMustRegisterAgain) {
  reg_all(cfg(3, 5000));
  const uint64_t before = g_epoch.load();
  auto r0 = op(all_reduce_req(0, 0));
  auto r1 = op(p2p(OpKind::recv, 1, 2, f32(4)));
  EXPECT_FALSE(is_done(*r0));
  EXPECT_TRUE(control(reset_atom::value, reset_call(2)).is_ok());
  EXPECT_TRUE(has(r0->status, Errc::reset, {"reset by peer 2"}));
  EXPECT_TRUE(has(r1->status, Errc::reset, {"reset by peer 2"}));
  EXPECT_TRUE(has(op(all_reduce_req(0, 1))->status, Errc::not_registered, {"before registering"}));
  reg_all(cfg(2, 10000));
  EXPECT_GT(g_epoch.load(), before);
  // A handle from before the reset carries the old registration generation.
  const uint64_t now = g_epoch.load();
  g_epoch = before;
  EXPECT_TRUE(has(op(all_reduce_req(0, 1))->status, Errc::not_registered, {"reset", "register again"}));
  g_epoch = now;
  expect_all_reduce_works(2, 0);
}

TEST_F(LocalServerActor, TheWaiterExpiresItsOwnRequestNamingWhoNeverCame) {
  reg_all(cfg(3, 10000));
  auto r0 = op(all_reduce_req(0, 0));
  auto r1 = op(all_reduce_req(1, 0));
  EXPECT_FALSE(sched.has_job());
  EXPECT_FALSE(sched.has_pending_timeout());  // the actor arms nothing: peer 0's thread expires it
  EXPECT_FALSE(is_done(*r0));
  core->on_timeout(r0->timer);
  ASSERT_TRUE(is_done(*r0) && is_done(*r1));
  EXPECT_TRUE(has(r0->status, Errc::timeout, {"all_reduce #0", "peer 2 never called within 10000 ms"}));
  EXPECT_EQ(r1->status, r0->status);
  EXPECT_EQ(op(all_reduce_req(2, 0))->status, r0->status);  // the late peer learns the same
  expect_all_reduce_works(3, 1);
}

TEST_F(LocalServerActor, TheActorStoppingLeavesTheCoreToTheRuntimeWhichFailsWhatWaits) {
  reg_all(cfg(3, 10000));
  auto w = op(all_reduce_req(0, 0));
  self->monitor(server);
  caf::anon_send_exit(server, caf::exit_reason::user_shutdown);
  run_jobs();
  bool down = false;
  self->receive([&](caf::down_msg&) { down = true; }, caf::after(std::chrono::seconds(0)) >> [] {});
  ASSERT_TRUE(down);
  EXPECT_FALSE(is_done(*w));  // the core lives on with the runtime
  core->close(Status(Errc::reset, "the runtime has been destroyed"));
  ASSERT_TRUE(is_done(*w));
  EXPECT_TRUE(has(w->status, Errc::reset, {"destroyed"}));
}

} // namespace
} // namespace chorus
