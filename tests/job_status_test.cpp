// The live stall report (chorus-ctl status): a 3-node job (2 peers each) in which rank 3 holds
// back before op #2 while everyone else enters it. Asked meanwhile, the orchestrator gathers every
// node's answer of what each rank is in and waits for, the ordinary way and in the host's arena.
// A wrong secret is refused. Then rank 3 goes on and every op completes. Also the report's
// wording, from a status built by hand.
#include <stdlib.h>
#include <unistd.h>

#include "actors/ctl/status_query.hpp"
#include "multi_node_fixture.hpp"

namespace chorus::multi_node {
namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A 3-node job (2 peers each) whose rank 3 holds back before op #2 while the others enter it:
// the status report once `settled` holds for it (or after 20 s), checked by `check`; then rank 3
// goes on and every op completes everywhere.
class JobStatus : public MultiNode {
 protected:
  template <class Settled, class Check>
  void stall_and_ask(Settled settled, Check check);
};

template <class Settled, class Check>
void JobStatus::stall_and_ask(Settled settled, Check check) {
  auto& t = *this;
  t.start_orchestrator(3, {"--secret", "s3"});
  auto kids = t.spawn_nodes({{}, {}, {}}, {"--peers", "2", "--scenario", "stall", "--victim", "3", "--at-op", "2",
                                           "--timeout-ms", "30000", "--secret", "s3"});
  TimedOutput out(kids);
  ASSERT_TRUE(out.read_until([&] { return out.find("PEER 3 HOLDING") != nullptr; }, Clock::now() + 60s)) << out.dump();

  // The other peers enter #2 right after rank 3 says it holds back; ask until all five are in it.
  std::string report;
  const auto give_up = Clock::now() + 20s;
  for (;;) {
    auto j = query_job_status("127.0.0.1", t.port_, "s3", {}, 10000ms);
    ASSERT_TRUE(j.is_ok()) << j.status().to_string();
    report = job_status_report(*j);
    EXPECT_EQ(j->nodes.size(), 3u) << report;
    EXPECT_TRUE(j->silent.empty()) << report;
    int busy = 0;
    for (const auto& n : j->nodes)
      for (const auto& p : n.peers) busy += p.busy && p.seq == 2;
    if ((busy == 5 && settled(report)) || Clock::now() > give_up) break;
  }
  EXPECT_TRUE(has(report, "collective 1: 3 of 3 nodes joined")) << report;
  check(report);
  EXPECT_TRUE(has(report, "rank 3: in no op; last done: group 0 #1 all_reduce f32[100] sum\n")) << report;

  auto refused = query_job_status("127.0.0.1", t.port_, "guess", {}, 10000ms);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), Errc::auth_failed) << refused.status().to_string();

  const std::size_t victim = out.find("PEER 3 HOLDING")->node;  // node ids come in order of arrival
  ASSERT_EQ(write(kids[victim].in, "go\n", 3), 3);
  auto done = [&] {
    for (std::size_t i = 0; i < kids.size(); ++i)
      if (!out.said(i, "NODE DONE") && !out.ended(i)) return false;
    return true;
  };
  ASSERT_TRUE(out.read_until(done, Clock::now() + 60s)) << out.dump();
  t.tell_nodes_to_exit();
  for (std::size_t i = 0; i < kids.size(); ++i) {
    out.read_until([&] { return out.ended(i); }, Clock::now() + 30s);
    EXPECT_EQ(wait_or_kill(kids[i].pid, 30000ms), 0) << out.dump();
  }
  for (int r = 0; r < 6; ++r) EXPECT_TRUE(out.find("PEER " + std::to_string(r) + " OK 3")) << out.dump();
}

// Ranks 0-1 and 4-5 run #2 waiting for node 1, rank 2 waits in its node for rank 3, rank 3 is in
// no op and last did #1. (On one host the op waits in the arena first, 50 ms, then goes the
// ordinary way; node 0's announcement reaches node 2 with the first data, or 20 ms into the op.)
TEST_F(JobStatus, StatusNamesTheOpEveryRankIsInAndWhatItWaitsFor) {
  const std::string ran = "ranks 0-1,4-5: group 0 #2 all_reduce f32[100] sum, running for ";
  stall_and_ask(
      [&](const std::string& r) { return has(r, ran) && has(r, "peer 3 of this node") && has(r, "node 1 ("); },
      [&](const std::string& report) {
        EXPECT_TRUE(has(report, ran)) << report;
        EXPECT_TRUE(has(report, "; waits for node 1 (not called yet)\n")) << report;
        EXPECT_TRUE(has(report, "rank 2: group 0 #2 all_reduce f32[100] sum, waiting for ")) << report;
        EXPECT_TRUE(has(report, "; waits for peer 3 of this node (not called yet)\n")) << report;
      });
}

// Where the nodes share a host and the arena waits as long as the op, the five wait there for
// rank 3 and the report says so.
TEST_F(JobStatus, StatusNamesWhomAnOpWaitsForInTheHostsArena) {
  setenv("CHORUS_ARENA_WAIT_MS", "60000", 1);
  const std::string waits = "ranks 0-2,4-5: group 0 #2 all_reduce f32[100] sum, waiting for ";
  stall_and_ask(
      [&](const std::string& r) { return has(r, waits) && has(r, "; waits for peer 3 (not called yet)\n"); },
      [&](const std::string& report) {
        EXPECT_TRUE(has(report, waits)) << report;
        EXPECT_TRUE(has(report, "; waits for peer 3 (not called yet)\n")) << report;
      });
  unsetenv("CHORUS_ARENA_WAIT_MS");
}

TEST(JobStatusReport, GroupsRanksByOpAndWait) {
  JobStatusData j;
  j.collective = 4;
  j.expected_nodes = j.registered_nodes = 2;
  j.complete = true;
  NodeStatusData a{0, "h", 1, {}, ""}, b{1, "h", 2, {}, ""};
  a.peers.push_back({0, true, 0, 9, "barrier", "running", 2'500'000'000, "node 1 (not called yet)", ""});
  a.peers.push_back({1, true, 0, 9, "barrier", "running", 1'000'000'000, "node 1 (not called yet)", ""});
  b.peers.push_back({2, false, 0, 8, "", "", 0, "", "group 0 #8 barrier"});
  j.nodes = {a, b};
  j.silent = {3};
  std::string error;
  auto back = decode_job_status(encode_job_status(j), error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ(job_status_report(*back),
            "collective 4: 2 of 2 nodes joined\n"
            "ranks 0-1: group 0 #9 barrier, running for 2.5 s; waits for node 1 (not called yet)\n"
            "rank 2: in no op; last done: group 0 #8 barrier\n"
            "node 3: did not answer\n");
  // The membership as the orchestrator knows it: who is no longer in, and why.
  using S = JobMemberData::State;
  j.silent.clear();
  j.nodes = {b};
  j.members = {{0, S::lost, "node lost: silent for 4.0 s"}, {1, S::joined, ""}, {2, S::left, ""}};
  back = decode_job_status(encode_job_status(j), error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ(back->members, j.members);
  EXPECT_EQ(job_status_report(*back),
            "collective 4: 2 of 2 nodes joined, 1 still in\n"
            "node 0: lost: node lost: silent for 4.0 s\n"
            "node 2: left\n"
            "rank 2: in no op; last done: group 0 #8 barrier\n");
  // After a shrink (docs/elastic.md): the epoch's members, and a newcomer waiting.
  j.collective = 5;
  j.epoch = 1;
  j.newcomers = 1;
  j.members = {{0, S::joined, ""}, {1, S::joined, ""}};
  back = decode_job_status(encode_job_status(j), error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ(back->epoch, 1u);
  EXPECT_EQ(job_status_report(*back).substr(0, 80),
            std::string("collective 5: membership epoch 1, 2 nodes joined, 1 newcomer(s) waiting for a grow\n").substr(0, 80));
}

// A node killed mid-job: the survivors stay in the collective, and the status says which node was
// lost and why, asks only the two still in, and reports nobody as silent.
TEST_F(MultiNode, StatusShowsALostNodeAsLostWithTheOrchestratorsReason) {
  start_orchestrator(3);
  auto kids = spawn_nodes({{}, {}, {}}, {"--peers", "1", "--scenario", "kill", "--victim", "2", "--at-op", "3",
                                         "--timeout-ms", "30000"});
  std::vector<ChildGuard> guards(kids.size());
  for (std::size_t i = 0; i < kids.size(); ++i) guards[i].pid = kids[i].pid;
  TimedOutput out(kids);
  auto reported = [&out] { return out.find("PEER 0 ERR ") && out.find("PEER 1 ERR "); };
  ASSERT_TRUE(out.read_until(reported, Clock::now() + 60s)) << out.dump();
  auto j = query_job_status("127.0.0.1", port_, "", {}, 10000ms);
  ASSERT_TRUE(j.is_ok()) << j.status().to_string();
  const std::string report = job_status_report(*j);
  std::printf("%s", report.c_str());
  EXPECT_TRUE(has(report, "collective 1: 3 of 3 nodes joined, 2 still in\nnode 2: lost: ")) << report;
  using S = JobMemberData::State;
  ASSERT_EQ(j->members.size(), 3u) << report;
  EXPECT_EQ(j->members[0].state, S::joined) << report;
  EXPECT_EQ(j->members[1].state, S::joined) << report;
  EXPECT_EQ(j->members[2].state, S::lost) << report;
  // The door saw the killed process's end close the connection.
  EXPECT_EQ(j->members[2].reason,
            "its connection to the orchestrator was closed from its end (the process exited or was killed)")
      << report;
  EXPECT_EQ(j->nodes.size(), 2u) << report;
  EXPECT_TRUE(j->silent.empty()) << report;
  tell_nodes_to_exit();
  for (std::size_t i = 0; i < kids.size(); ++i)
    if (!out.said(i, "VICTIM")) {
      EXPECT_GE(wait_or_kill(kids[i].pid, 10000ms), 0) << "node process " << i << " had to be killed";
      guards[i].pid = -1;
    }
}

} // namespace
} // namespace chorus::multi_node
