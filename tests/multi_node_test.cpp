// Multi-process tests on loopback in which something goes wrong (the orchestrator daemon and
// several node processes, chorus-test-node): peers of different nodes or of one node that
// disagree, a node killed or frozen mid-op, a node killed while a peer waits for its node-mate,
// a peer that stops calling, a wrong secret, a mismatched configuration. Every survivor must get
// the right error, naming the right peer or node, at once rather than after its timeout.
#include <signal.h>

#include "actors/ctl/status_query.hpp"
#include "multi_node_fixture.hpp"

namespace chorus::multi_node {
namespace {

// "PEER r KIND code message" (KIND: ERR, or NEXT in kill-while-waiting) as a PeerLine.
PeerLine status_line(const std::string& text) {
  std::istringstream l(text);
  std::string tag, rank, kind;
  PeerLine p;
  l >> tag >> rank >> kind >> p.code;
  std::getline(l, p.message);
  if (!p.message.empty() && p.message[0] == ' ') p.message.erase(0, 1);
  return p;
}

TEST_F(MultiNode, MembersThatDisagreeOnAGroupAllFail) {
  start_orchestrator(3);
  auto nodes = run_nodes({{}, {}, {}}, {"--peers", "2", "--scenario", "group-mismatch", "--timeout-ms", "3000"});
  auto lines = peer_lines(nodes);
  for (const char* r : {"0", "1", "2"}) {
    ASSERT_TRUE(lines.count(r)) << dump(nodes);
    EXPECT_EQ(lines[r].code, "invalid_argument") << "peer " << r << ": " << lines[r].message;
    EXPECT_NE(lines[r].message.find("peer 1 asked for a different member list than peer 0"), std::string::npos)
        << "peer " << r << ": " << lines[r].message;
  }
  for (const char* r : {"3", "4", "5"}) EXPECT_TRUE(lines[r].ok) << "peer " << r;
}

// Node with peers 2..3 passes 11 elements where the others pass 10.
TEST_F(MultiNode, DisagreementAcrossNodesGivesEveryPeerTheSameError) {
  start_orchestrator(3);
  auto nodes = run_nodes({{}, {}, {}}, {"--peers", "2", "--scenario", "mismatch", "--victim", "2"});
  auto lines = peer_lines(nodes);
  ASSERT_EQ(lines.size(), 6u) << dump(nodes);
  const std::string want = "all_reduce #0: node 0 calls all_reduce sum of f32[10] but node 1 calls all_reduce sum of f32[11]";
  for (auto& [rank, p] : lines) {
    EXPECT_EQ(p.code, "shape_mismatch") << "peer " << rank;
    EXPECT_EQ(p.message, want) << "peer " << rank;
  }
}

// Node 1 cannot run the op (rank 3 passes 11 elements where its node-mate passes 10, or a GPU
// tensor that cannot be staged through the host): every peer of every node gets that node's error
// at once, not after the timeout, and the following op works.
TEST_F(MultiNode, ANodeWhosePeersDisagreeFailsTheOpEverywhereAndTheNextOpWorks) {
  expect_node_failure_everywhere("local-mismatch", "shape_mismatch", "node 1:");
}

TEST_F(MultiNode, AFailedGpuStagingFailsTheOpEverywhereAndTheNextOpWorks) {
  expect_node_failure_everywhere("gpu-staging", "device_error", "peer 3 could not take part");
}

// Nodes 0 and 1 both fail the op (ranks 1 and 3): still one error for every peer, the lowest
// failing node's.
TEST_F(MultiNode, TwoNodesFailingOneOpGiveEveryPeerTheSameError) {
  expect_node_failure_everywhere("gpu-staging-two", "device_error", "node 0: peer 1 could not take part");
}

// A send across nodes whose GPU tensor cannot be staged: sender and receiver get the same error,
// and the pair's next transfer works.
TEST_F(MultiNode, AFailedSendAcrossNodesFailsBothSides) {
  start_orchestrator(2);
  auto nodes = run_nodes({{}, {}}, {"--peers", "2", "--scenario", "p2p-staging"});
  auto lines = peer_lines(nodes);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_TRUE(lines["1"].ok) << lines["1"].message;
  EXPECT_TRUE(lines["3"].ok) << lines["3"].message;
  EXPECT_EQ(lines["0"].code, "device_error") << lines["0"].message;
  EXPECT_EQ(lines["0"].message, lines["2"].message);
  EXPECT_EQ(lines["2"].code, "device_error");
  EXPECT_NE(lines["0"].message.find("peer 0 could not send its tensor"), std::string::npos) << lines["0"].message;
}

// Receives from any source take sends from this node (through the local server) and from the
// other (through the mailbox), whichever come first (multi_node_peer_ops.cpp, recv_any).
TEST_F(MultiNode, ARecvFromAnySourceTakesSendsOfEveryNode) {
  start_orchestrator(2);
  auto nodes = run_nodes({{}, {}}, {"--peers", "2", "--scenario", "recv-any"});
  expect_all_ok(nodes, 4, 3);
}

// Across nodes, as within one, a receive takes only its own handle's messages: two handles'
// sends with one tag are not mixed up (multi_node_peer_ops.cpp, p2p_handles).
TEST_F(MultiNode, SendsOfTwoHandlesWithOneTagReachTheirOwnReceives) {
  start_orchestrator(2);
  auto nodes = run_nodes({{}, {}}, {"--peers", "2", "--scenario", "p2p-handles"});
  expect_all_ok(nodes, 4, 4);
}

// Across nodes, as within one, receives that may take the same messages take them in the order
// they were called (multi_node_peer_ops.cpp, recv_order).
TEST_F(MultiNode, ReceivesTakeMessagesInTheOrderTheyWereCalled) {
  start_orchestrator(2);
  auto nodes = run_nodes({{}, {}}, {"--peers", "2", "--scenario", "recv-order"});
  expect_all_ok(nodes, 4, 7);
}

// A send that timed out across nodes withdraws its message: the next receive of the pair takes
// the next send's data, and the next send its own answer (multi_node_peer_ops.cpp, stale_send).
TEST_F(MultiNode, ASendThatTimedOutLeavesNoMessageForALaterReceive) {
  start_orchestrator(2);
  auto nodes = run_nodes({{}, {}}, {"--peers", "2", "--scenario", "stale-send"});
  expect_all_ok(nodes, 4, 8);
}

// The same exchanges with every send's data waiting for its receive's pull (the node processes'
// CHORUS_P2P_EAGER_KIB=0): receives from any source, handles, order, withdrawals, failed sends.
TEST_F(MultiNode, PointToPointHoldsWhenEveryReceivePullsItsData) {
  struct Eager {
    Eager() { setenv("CHORUS_P2P_EAGER_KIB", "0", 1); }
    ~Eager() { unsetenv("CHORUS_P2P_EAGER_KIB"); }
  } eager;
  start_orchestrator(2);  // it serves one job after another
  const std::pair<const char*, int> runs[] = {{"recv-any", 3}, {"p2p-handles", 4}, {"recv-order", 7}, {"stale-send", 8}};
  for (const auto& [scenario, ops] : runs) {
    SCOPED_TRACE(scenario);
    expect_all_ok(run_nodes({{}, {}}, {"--peers", "2", "--scenario", scenario}), 4, ops);
  }
  auto lines = peer_lines(run_nodes({{}, {}}, {"--peers", "2", "--scenario", "p2p-staging"}));
  EXPECT_EQ(lines["0"].code, "device_error") << lines["0"].message;
  EXPECT_EQ(lines["0"].message, lines["2"].message);
  EXPECT_TRUE(lines["1"].ok && lines["3"].ok) << lines["1"].message << " / " << lines["3"].message;
}

// OpOptions::timeout bounds the wait for other nodes too, not only for the node's own peers
// (multi_node_peer_ops.cpp, own_timeout; the nodes' Config::timeout is the harness's, 30 s).
TEST_F(MultiNode, AnOpsOwnTimeoutBoundsItsWaitForOtherNodes) {
  start_orchestrator(2);
  auto nodes = run_nodes({{}, {}}, {"--peers", "1", "--scenario", "own-timeout", "--timeout-ms", "30000"});
  expect_all_ok(nodes, 2, 2);
}

TEST_F(MultiNode, KilledNodeIsReportedByEverySurvivorAndTheOrchestratorServesTheNextCollective) {
  start_orchestrator(3);
  const auto shm_before = dev_shm_entries();
  auto t0 = std::chrono::steady_clock::now();
  setenv("CHORUS_DEBUG", "warn", 1);  // the node processes log what they see at warn
  auto nodes = run_nodes({{}, {}, {}}, {"--peers", "2", "--scenario", "kill", "--victim", "2", "--at-op", "20",
                                        "--timeout-ms", "5000"});
  unsetenv("CHORUS_DEBUG");
  auto took = std::chrono::steady_clock::now() - t0;
  auto lines = peer_lines(nodes);
  int survivors = 0;
  for (auto& [rank, p] : lines) {
    if (rank == "2" || rank == "3") continue;  // the victim's node
    ++survivors;
    EXPECT_EQ(p.code, "node_lost") << "peer " << rank << ": " << p.message;
    EXPECT_NE(p.message.find("node 1"), std::string::npos) << p.message;  // rank 2 is on node 1
  }
  EXPECT_EQ(survivors, 4) << dump(nodes);
  EXPECT_LT(took, 5000ms) << "the survivors waited out their timeout instead of noticing the loss";
  // The three processes shared memory (one host); the SIGKILLed one left nothing behind.
  int reported = 0;
  for (const auto& n : nodes)
    if (shm_segments(n) >= 0) {
      ++reported;
      EXPECT_EQ(shm_segments(n), 2) << dump(nodes);
    }
  EXPECT_EQ(reported, 2) << "the two survivors say so\n" << dump(nodes);
  // At warn each survivor's log names the lost node (net) and its failed ops (op).
  int logged = 0;
  for (const auto& n : nodes)
    if (n.output.find("WARN net node") != std::string::npos && n.output.find("lost node 1:") != std::string::npos &&
        n.output.find("WARN op rank") != std::string::npos)
      ++logged;
  EXPECT_EQ(logged, 2) << dump(nodes);
  EXPECT_EQ(dev_shm_entries(), shm_before);
  // The daemon is still up and admits a fresh collective.
  auto again = run_nodes({{}, {}, {}}, {"--peers", "2", "--scenario", "mixed", "--ops", "50"});
  expect_all_ok(again, 6, 50);
}

// Node 0's peer A (rank 0) waits in its node's local phase for its node-mate B, who holds back,
// when the test kills node 1's process (ranks 2 and 3) once every other peer said it is in place
// (multi_node_peer_faults.cpp, kill-while-waiting). A must hear of the loss at once, well within
// its 20 s op timeout: in the op it waits in, and in the next one, which it enters before its
// node-mate; so must B and node 2's peers. Every error names node 1.
TEST_F(MultiNode, APeerWaitingForItsNodeMateHearsOfAKilledNodeAtOnce) {
  start_orchestrator(3);
  auto kids = spawn_nodes({{}, {}, {}}, {"--peers", "2", "--scenario", "kill-while-waiting", "--victim", "2",
                                         "--at-op", "5", "--timeout-ms", "20000"});
  std::vector<ChildGuard> guards(kids.size());  // whatever happens, nothing outlives the test
  for (std::size_t i = 0; i < kids.size(); ++i) guards[i].pid = kids[i].pid;
  TimedOutput out(kids);
  auto said = [&](const std::vector<std::string>& ranks, const std::vector<std::string>& kinds) {
    return [&out, ranks, kinds] {
      for (const auto& r : ranks)
        for (const auto& k : kinds)
          if (!out.find("PEER " + r + " " + k)) return false;
      return true;
    };
  };
  ASSERT_TRUE(out.read_until(said({"1", "2", "3", "4", "5"}, {"READY"}), Clock::now() + 60s)) << out.dump();
  const std::size_t victim = out.find("PEER 2 READY")->node;
  ASSERT_EQ(out.find("PEER 3 READY")->node, victim) << out.dump();
  ASSERT_NE(victim, out.find("PEER 1 READY")->node) << out.dump();
  const auto killed = Clock::now();
  kill(kids[victim].pid, SIGKILL);
  const std::vector<std::string> survivors{"0", "1", "4", "5"};
  out.read_until(said(survivors, {"ERR", "NEXT"}), killed + 45s);
  for (const auto& r : survivors) {
    const auto* err = out.find("PEER " + r + " ERR ");
    const auto* next = out.find("PEER " + r + " NEXT ");
    ASSERT_TRUE(err && next) << "peer " << r << " did not report both ops\n" << out.dump();
    EXPECT_LT(err->at - killed, 5s) << "peer " << r << " waited out its timeout: " << err->text;
    EXPECT_LT(next->at - killed, 5s) << "peer " << r << ": " << next->text;
    for (const PeerLine& p : {status_line(err->text), status_line(next->text)}) {
      EXPECT_EQ(p.code, "node_lost") << "peer " << r << ": " << p.message;
      EXPECT_NE(p.message.find("node 1 lost"), std::string::npos) << "peer " << r << ": " << p.message;
    }
  }
  // A's errors are those of the op it waited in and of the one it entered first; B's the same.
  const PeerLine a = status_line(out.find("PEER 0 ERR ")->text), a_next = status_line(out.find("PEER 0 NEXT ")->text);
  EXPECT_EQ(a.message.rfind("all_reduce #5: node 1 lost", 0), 0u) << a.message;
  EXPECT_EQ(a_next.message.rfind("barrier #6: node 1 lost", 0), 0u) << a_next.message;
  EXPECT_EQ(status_line(out.find("PEER 1 ERR ")->text).message, a.message);
  EXPECT_EQ(status_line(out.find("PEER 1 NEXT ")->text).message, a_next.message);
  tell_nodes_to_exit();  // every survivor has reported both ops
  for (std::size_t i = 0; i < kids.size(); ++i) {
    wait_or_kill(kids[i].pid, 10000ms);
    guards[i].pid = -1;  // reaped
  }
}

// Six peers on three nodes, and rank 3 never called op #5: every other peer reports it, in one
// error (the words of every node's deadline).
void expect_all_but_rank3_timed_out_waiting_for_it(const std::vector<NodeResult>& nodes) {
  auto lines = peer_lines(nodes);
  ASSERT_EQ(lines.size(), 6u) << MultiNode::dump(nodes);
  for (auto& [rank, p] : lines) {
    if (rank == "3") continue;  // the one that stopped
    EXPECT_EQ(p.code, "timeout") << "peer " << rank << ": " << p.message;
    EXPECT_EQ(p.message, "all_reduce #5: rank 3 never called within the op's timeout") << "peer " << rank;
  }
}

// 3 nodes x 2 peers; rank 3 (node 1) never calls op #5, its node-mate rank 2 does. Half the
// timeout gone, node 1 tells the others which of its ranks have not called, so every peer names
// rank 3, not node 1 (whose rank 2 did call), in the same words: its node-mate too, whose timeout
// node 1 tells the others (they may hear of it before their own deadline).
TEST_F(MultiNode, APeerThatNeverCallsIsNamedAsTheRankByEveryNode) {
  start_orchestrator(3);
  setenv("CHORUS_DEBUG", "warn", 1);  // half the timeout gone, each node says what it waits for
  auto nodes = run_nodes({{}, {}, {}}, {"--peers", "2", "--scenario", "skip", "--victim", "3", "--at-op", "5",
                                        "--timeout-ms", "1500"});
  unsetenv("CHORUS_DEBUG");
  const std::string all = dump(nodes);
  EXPECT_NE(all.find("all_reduce #5: rank 2 waits for rank 3 (not called yet) after 750 ms, half the op's timeout"),
            std::string::npos)
      << all;
  // The other nodes' own half-time warning races node 1's note: either name.
  EXPECT_TRUE(all.find("all_reduce #5: waiting for node 1 (not called yet), half the op's timeout gone") !=
                  std::string::npos ||
              all.find("all_reduce #5: waiting for rank 3 (not called yet), half the op's timeout gone") !=
                  std::string::npos)
      << all;
  expect_all_but_rank3_timed_out_waiting_for_it(nodes);
}

// The same where rank 3's node-mate gives the op 2 s and every other peer 20 s: its node times
// out in its local phase and tells the others, which stop at once (3 nodes: those waiting for
// data forwarded from another node too), every peer with the same error.
TEST_F(MultiNode, APeerThatNeverCallsEndsTheOpEverywhereOnceItsNodeTimesOut) {
  start_orchestrator(3);
  const auto t0 = Clock::now();
  auto nodes = run_nodes({{}, {}, {}}, {"--peers", "2", "--scenario", "skip-mates-brief", "--victim", "3", "--at-op",
                                        "5", "--timeout-ms", "20000"});
  EXPECT_LT(Clock::now() - t0, 12s) << "the other nodes waited out their own timeout";
  expect_all_but_rank3_timed_out_waiting_for_it(nodes);
}

// An op that timed out among node 1's peers, before they all called, leaves nothing behind: the
// victim's late call gets the same error, the next op runs on every node, and no node's table of
// ops in flight still holds the one that failed (node 0's frames had put it in node 1's).
TEST_F(MultiNode, AnOpThatTimedOutBeforeItsNodeLaunchedItLeavesNothingBehind) {
  start_orchestrator(2);
  auto nodes = run_nodes({{}, {}}, {"--peers", "2", "--scenario", "late-after-local-timeout", "--victim", "3",
                                    "--at-op", "3", "--timeout-ms", "10000"});
  expect_all_ok(nodes, 4, 5);
}

// Node 0's timeout (1 s) is shorter than the others' (6 s), and it exits at once after its op
// fails: the peers of node 2 still waiting in that op see node 0 leave, and report what node 0
// found (the straggler and the op), not its departure, long before their own timeout.
TEST_F(MultiNode, ANodeThatLeavesAfterATimeoutPassesTheCauseToThoseStillWaiting) {
  start_orchestrator(3);
  auto kids = spawn_nodes({{"--timeout-ms", "1000", "--exit-when-told", "0"}, {}, {}},
                          {"--peers", "2", "--scenario", "skip", "--victim", "3", "--at-op", "5", "--timeout-ms", "6000"});
  std::vector<ChildGuard> guards(kids.size());
  for (std::size_t i = 0; i < kids.size(); ++i) guards[i].pid = kids[i].pid;
  TimedOutput out(kids);
  auto ended = [&out] {
    for (const char* r : {"0", "1", "4", "5"})
      if (!out.find(std::string("PEER ") + r + " ERR ")) return false;
    return true;
  };
  ASSERT_TRUE(out.read_until(ended, Clock::now() + 30s)) << out.dump();
  const auto* first = out.find("PEER 0 ERR ");
  const PeerLine cause = status_line(first->text);
  EXPECT_EQ(cause.code, "timeout") << cause.message;
  EXPECT_EQ(cause.message.rfind("all_reduce #5: ", 0), 0u) << cause.message;
  for (const char* r : {"4", "5"}) {
    const auto* l = out.find(std::string("PEER ") + r + " ERR ");
    const PeerLine p = status_line(l->text);
    EXPECT_EQ(p.code, cause.code) << "rank " << r << ": " << p.message;
    EXPECT_EQ(p.message, cause.message) << "rank " << r;
    EXPECT_LT(l->at - first->at, 3s) << "rank " << r << " waited out its own timeout: " << p.message;
  }
  tell_nodes_to_exit();
  for (std::size_t i = 0; i < kids.size(); ++i) {
    EXPECT_GE(wait_or_kill(kids[i].pid, 20000ms), 0) << "node process " << i << " had to be killed";
    guards[i].pid = -1;
  }
}

// The same inside a group of ranks 1-5: global rank 3 is the group's rank 2, and every node names
// it so.
TEST_F(MultiNode, APeerThatNeverCallsInAGroupIsNamedByItsGroupRank) {
  start_orchestrator(3);
  auto nodes = run_nodes({{}, {}, {}}, {"--peers", "2", "--scenario", "skip-in-group", "--victim", "3", "--at-op", "2",
                                        "--timeout-ms", "1500"});
  auto lines = peer_lines(nodes);
  ASSERT_EQ(lines.size(), 6u) << dump(nodes);
  for (const std::string r : {"1", "4", "5"}) {  // rank 0 is in no group op
    const PeerLine& p = lines.at(r);
    EXPECT_EQ(p.code, "timeout") << "peer " << r << ": " << p.message;
    EXPECT_NE(p.message.find("#2: rank 2 never called within the op's timeout"), std::string::npos)
        << "peer " << r << ": " << p.message;
  }
  // Its node-mate (global rank 2, the group's rank 1) waits for it in its node, and names it the same.
  EXPECT_NE(lines.at("2").message.find("#2: rank 2 never called within the op's timeout"), std::string::npos)
      << lines.at("2").message;
}

TEST_F(MultiNode, FrozenNodeIsReportedByEverySurvivor) {
  start_orchestrator(3);
  // The op timeout (20 s) is far beyond the limit (8 s): the loss must be noticed through
  // heartbeats, not by waiting the op out. (The limit leaves the survivors room to exit under a
  // loaded ctest -j2: a 4 s limit once cut one off.)
  auto nodes = run_nodes({{}, {}, {}}, {"--peers", "2", "--scenario", "freeze", "--victim", "2", "--at-op", "20",
                                        "--timeout-ms", "20000"},
                         8000ms);
  auto lines = peer_lines(nodes);
  int survivors = 0;
  for (auto& [rank, p] : lines) {
    if (rank == "2" || rank == "3") continue;
    ++survivors;
    EXPECT_EQ(p.code, "node_lost") << "peer " << rank << ": " << p.message;
    EXPECT_NE(p.message.find("node 1"), std::string::npos) << p.message;
    // In the orchestrator's words: the door saw the node go silent (it did not exit).
    EXPECT_NE(p.message.find("silent for "), std::string::npos) << p.message;
  }
  EXPECT_EQ(survivors, 4) << dump(nodes);
  // The surviving processes exited by themselves (the frozen one was killed at the limit).
  int exited = 0;
  for (auto& n : nodes) exited += n.status >= 0 ? 1 : 0;
  EXPECT_EQ(exited, 2) << dump(nodes);
}

// A node freezes inside 16 MiB all-reduces: the survivor sending to it finds the shared-memory ring
// or the socket buffer full, and the receiver waits for bytes that will not come. The
// orchestrator's announcement (heartbeats, a few seconds) must end both waits at once, not the
// op's timeout (30 s). Resumed, the frozen node says it stood still (it was dropped) and blames
// none of the nodes that cut it off meanwhile. `how`: the flags that choose the path.
class FreezeIn16MiB : public MultiNode {
 protected:
  void run(const std::vector<std::string>& how);
};

void FreezeIn16MiB::run(const std::vector<std::string>& how) {
  start_orchestrator(3);
  setenv("CHORUS_DEBUG", "warn", 1);  // each node logs "lost node 2" when it hears of it
  std::vector<std::string> common{"--peers", "1", "--scenario", "freeze", "--victim", "2", "--at-op", "3",
                                  "--elements", std::to_string(4u << 20), "--timeout-ms", "30000"};
  common.insert(common.end(), how.begin(), how.end());
  auto kids = spawn_nodes({{}, {}, {}}, common);
  unsetenv("CHORUS_DEBUG");
  std::vector<ChildGuard> guards(kids.size());
  for (std::size_t i = 0; i < kids.size(); ++i) guards[i].pid = kids[i].pid;
  TimedOutput out(kids);
  // Before the loss is announced (4 s of heartbeats), the status says what each survivor waits
  // for: node 2, which froze before calling op #3, or its taking their data; never that node 0 or
  // 1 has not called (both have: a rank blocked in a send still spreads its node's word).
  ASSERT_TRUE(out.read_until([&out] { return out.find("PEER 2 VICTIM") != nullptr; }, Clock::now() + 60s)) << out.dump();
  // Asked until ranks 0 and 1 have both been in op #3 for half a second (every node's word has
  // spread by then: after 20 ms); each answer takes 2 s, node 2's silence.
  auto settled = [](const JobStatusData& j) {
    int in = 0;
    for (const auto& n : j.nodes)
      for (const auto& p : n.peers) in += p.busy && p.seq == 3 && p.waited_ns >= 500'000'000;
    return in == 2;
  };
  std::string report;
  JobStatusData status;
  for (const auto give_up = Clock::now() + 3s; Clock::now() < give_up;) {
    auto j = query_job_status("127.0.0.1", port_, "", {}, 5000ms);
    ASSERT_TRUE(j.is_ok()) << j.status().to_string();
    status = *j;
    report = job_status_report(status);
    if (settled(status)) break;
  }
  std::printf("%s", report.c_str());
  EXPECT_TRUE(settled(status)) << "ranks 0 and 1 were not both in op #3 for half a second\n" << report;
  // Each waits for what it truly waits for: node 2 (its word, its data, its taking ours), or, in
  // a ring, the data of the survivor that itself waits for node 2; never for a node that has
  // called as one that has not.
  int asked = 0, on_node_2 = 0;
  for (const auto& n : status.nodes)
    for (const auto& p : n.peers) {
      if (!p.busy) continue;
      ++asked;
      on_node_2 += p.waiting_for.find("node 2") != std::string::npos;
      EXPECT_TRUE(p.waiting_for.find("(not called yet)") == std::string::npos || p.waiting_for == "node 2 (not called yet)")
          << report;
    }
  EXPECT_EQ(asked, 2) << report;
  EXPECT_GE(on_node_2, 1) << report;
  auto ended = [&out] { return out.find("PEER 0 ERR ") && out.find("PEER 1 ERR "); };
  ASSERT_TRUE(out.read_until(ended, Clock::now() + 25s)) << "the survivors waited on\n" << out.dump();
  for (const std::string r : {"0", "1"}) {
    const auto* err = out.find("PEER " + r + " ERR ");
    const auto* heard = out.line_of(err->node, "lost node 2");
    ASSERT_NE(heard, nullptr) << "rank " << r << "'s node did not hear of the loss\n" << out.dump();
    const PeerLine p = status_line(err->text);
    EXPECT_EQ(p.code, "node_lost") << "rank " << r << ": " << p.message;
    EXPECT_NE(p.message.find("node 2"), std::string::npos) << "rank " << r << ": " << p.message;
    const auto after = std::chrono::duration_cast<std::chrono::milliseconds>(err->at - heard->at);
    std::printf("rank %s ended %lld ms after its node heard of the loss: %s\n", r.c_str(),
                static_cast<long long>(after.count()), err->text.c_str());
    EXPECT_LT(after, 100ms * kWorkSlowdown) << "rank " << r << " waited on after the announcement\n" << out.dump();
  }
  // The frozen node resumes: it was dropped, and says so, blaming no one else.
  const std::size_t frozen = out.find("PEER 2 VICTIM")->node;
  kill(kids[frozen].pid, SIGCONT);
  ASSERT_TRUE(out.read_until([&out] { return out.find("PEER 2 ERR ") != nullptr; }, Clock::now() + 20s))
      << "the resumed node did not end its op\n" << out.dump();
  const PeerLine resumed = status_line(out.find("PEER 2 ERR ")->text);
  std::printf("the resumed node: %s\n", resumed.message.c_str());
  EXPECT_EQ(resumed.code, "node_lost") << resumed.message;
  EXPECT_NE(resumed.message.find("this node stood still for "), std::string::npos) << resumed.message;
  EXPECT_EQ(resumed.message.find("node 0"), std::string::npos) << resumed.message;
  EXPECT_EQ(resumed.message.find("node 1"), std::string::npos) << resumed.message;
  tell_nodes_to_exit();
  for (std::size_t i = 0; i < kids.size(); ++i) {
    EXPECT_GE(wait_or_kill(kids[i].pid, 10000ms), 0) << "node process " << i << " had to be killed";
    guards[i].pid = -1;
  }
}

TEST_F(FreezeIn16MiB, AllReducesOverSharedMemoryEndEveryWaitAtTheAnnouncement) { run({"--transport", "auto"}); }

// Node 2 freezes 3 ms into op #3 itself (it has called it; transfers are under way), a 64 MiB
// ring over sockets: a ring step's 21 MiB do not fit in the kernel's buffers, so the survivor
// sending to node 2 is blocked in that send.
TEST_F(FreezeIn16MiB, TheMiddleOfA64MiBRingOverSocketsEndsEveryWaitAtTheAnnouncement) {
  run({"--transport", "network", "--strategy", "ring", "--freeze-after-ms", "3", "--elements",
       std::to_string(16u << 20)});
}

TEST_F(FreezeIn16MiB, RingsOverSocketsEndEveryWaitAtTheAnnouncement) {
  run({"--transport", "network", "--strategy", "ring"});
}

// A 256 MiB broadcast from rank 0 down a tree of arity 2 (rank 0 sends to nodes 1 and 2 itself):
// node 2 freezes inside op #3 as it is about to wait there for data (its global client's
// data-wait hook, on the op's own thread), by then its announcement has left (an event, so the
// freeze comes neither before the word nor after the op, however slow the build), and rank 0
// is left in a send that node 2 does not take. Its status says so (the one wait that is neither a
// node's word nor data: `node 2 to take our data`), and the announcement of the loss ends that send.
TEST_F(MultiNode, ASendToAFrozenNodeIsNamedAsItsTakingOurData) {
  start_orchestrator(3);
  auto kids = spawn_nodes({{}, {}, {}}, {"--peers", "1", "--scenario", "freeze", "--victim", "2", "--at-op", "3",
                                         "--elements", std::to_string(64u << 20), "--transport", "network", "--op",
                                         "broadcast", "--strategy", "tree:2", "--freeze-when", "receiving",
                                         "--timeout-ms", "30000"});
  std::vector<ChildGuard> guards(kids.size());
  for (std::size_t i = 0; i < kids.size(); ++i) guards[i].pid = kids[i].pid;
  TimedOutput out(kids);
  ASSERT_TRUE(out.read_until([&out] { return out.find("PEER 2 VICTIM") != nullptr; }, Clock::now() + 60s)) << out.dump();
  // Asked until rank 0 has been in op #3 for half a second (node 2 froze as its data began) with
  // both its children called: node 1 may come to op #3 later than that (slow under ASan), and
  // rank 0 then waits for it first.
  std::string report, root_waits;
  const auto both_called = [&root_waits] {
    return !root_waits.empty() && root_waits.find("not called yet") == std::string::npos;
  };
  for (const auto give_up = Clock::now() + 10s; Clock::now() < give_up && !both_called();) {
    out.read_until([&out] { return out.find("FREEZE MISSED") != nullptr; }, Clock::now() + 20ms);
    ASSERT_EQ(out.find("FREEZE MISSED"), nullptr) << "node 2's op #3 never waited for data\n" << out.dump();
    auto j = query_job_status("127.0.0.1", port_, "", {}, 5000ms);
    ASSERT_TRUE(j.is_ok()) << j.status().to_string();
    report = job_status_report(*j);
    for (const auto& n : j->nodes)
      for (const auto& p : n.peers)
        if (p.rank == 0 && p.busy && p.seq == 3 && p.waited_ns >= 500'000'000) root_waits = p.waiting_for;
  }
  std::printf("%s", report.c_str());
  EXPECT_EQ(root_waits, "node 2 to take our data") << report;
  ASSERT_TRUE(out.read_until([&out] { return out.find("PEER 0 ERR ") != nullptr; }, Clock::now() + 25s))
      << "rank 0 waited on\n" << out.dump();
  EXPECT_EQ(status_line(out.find("PEER 0 ERR ")->text).code, "node_lost") << out.dump();
  kill(kids[out.find("PEER 2 VICTIM")->node].pid, SIGCONT);
  tell_nodes_to_exit();
  for (std::size_t i = 0; i < kids.size(); ++i) {
    EXPECT_GE(wait_or_kill(kids[i].pid, 10000ms), 0) << "node process " << i << " had to be killed";
    guards[i].pid = -1;
  }
}

TEST_F(MultiNode, WrongSecretIsRejectedAndDoesNotDisturbTheOthers) {
  start_orchestrator(2, {"--secret", "s3cret"});
  // Three processes, a collective of two (the later --nodes wins): the one with the wrong secret
  // is turned away, the other two run.
  auto nodes = run_nodes({{"--secret", "s3cret"}, {"--secret", "guess"}, {"--secret", "s3cret"}},
                         {"--nodes", "2", "--peers", "1", "--scenario", "mixed", "--ops", "30", "--timeout-ms", "5000"});
  EXPECT_FALSE(nodes[1].exited_ok());
  EXPECT_NE(nodes[1].output.find("PEER ? ERR auth_failed wrong secret"), std::string::npos) << dump(nodes);
  std::vector<NodeResult> good{nodes[0], nodes[2]};
  expect_all_ok(good, 2, 30);
}

TEST_F(MultiNode, MismatchedConfigurationNamesTheField) {
  start_orchestrator(2, {"--timeout-ms", "2000"});
  auto nodes = run_nodes({{"--strategy", "auto"}, {"--strategy", "ring"}},
                         {"--peers", "1", "--scenario", "mixed", "--ops", "5", "--timeout-ms", "4000"});
  const std::string all = nodes[0].output + nodes[1].output;
  EXPECT_NE(all.find("ERR config_mismatch config differs from the first node's: global strategy for all_reduce"),
            std::string::npos) << dump(nodes);
  EXPECT_FALSE(nodes[0].exited_ok());
  EXPECT_FALSE(nodes[1].exited_ok());
}

} // namespace
} // namespace chorus::multi_node
