// Multi-process tests on loopback: the orchestrator daemon and several node processes
// (chorus-test-node, see multi_node_peer.cpp) run every op across nodes, many consecutive ops,
// uneven peers per node, and the failures: a node killed or frozen mid-op, a wrong secret, a
// mismatched configuration, peers of different nodes that disagree. A last test runs nodes in
// their own network namespaces (as root only).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "testkit/process.hpp"

namespace chorus {
namespace {

using namespace chorus::testkit;
using namespace std::chrono_literals;

struct PeerLine {
  bool ok = false;
  int ops = 0;
  std::string code, message;
};

struct NodeResult {
  int status = -1;  // wait status; -1: did not exit in time (killed)
  std::string output;
  bool exited_ok() const { return status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0; }
};

// "PEER r OK n" / "PEER r ERR code message" lines of every node, by global rank.
std::map<std::string, PeerLine> peer_lines(const std::vector<NodeResult>& nodes) {
  std::map<std::string, PeerLine> out;
  for (const auto& n : nodes) {
    std::istringstream in(n.output);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream l(line);
      std::string tag, rank, kind;
      if (!(l >> tag >> rank >> kind) || tag != "PEER") continue;
      PeerLine p;
      if (kind == "OK") {
        p.ok = true;
        l >> p.ops;
      } else if (kind == "ERR") {
        l >> p.code;
        std::getline(l, p.message);
        if (!p.message.empty() && p.message[0] == ' ') p.message.erase(0, 1);
      } else {
        continue;
      }
      out[rank] = p;
    }
  }
  return out;
}

class MultiNode : public ::testing::Test {
 protected:
  static std::string node_path() { return sibling("chorus-test-node"); }

  // Starts the daemon for `nodes` nodes with extra flags.
  void start_orchestrator(uint32_t nodes, std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"--port", "0", "--nodes", std::to_string(nodes), "--heartbeat-ms", "200"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto [pid, port, error] = testkit::start_orchestrator(args);
    orch_.pid = pid;
    port_ = port;
    ASSERT_GT(pid, 0) << error;
  }

  // Runs one node process per entry of `per_node` (its extra flags), all with `common`, and
  // collects their output; processes still running after `limit` are killed.
  std::vector<NodeResult> run_nodes(const std::vector<std::vector<std::string>>& per_node,
                                    const std::vector<std::string>& common,
                                    std::chrono::milliseconds limit = 60000ms) {
    std::vector<Child> kids;
    for (const auto& extra : per_node) {
      std::vector<std::string> args{"--orchestrator", "127.0.0.1:" + std::to_string(port_),
                                    "--nodes", std::to_string(per_node.size())};
      args.insert(args.end(), common.begin(), common.end());
      args.insert(args.end(), extra.begin(), extra.end());
      kids.push_back(spawn(node_path(), args, Output::pipe_with_stderr));
    }
    std::vector<NodeResult> out(kids.size());
    std::vector<std::thread> readers;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (std::size_t i = 0; i < kids.size(); ++i)
      readers.emplace_back([&, i] { out[i].output = read_all(kids[i].out, deadline); });
    for (auto& t : readers) t.join();
    for (std::size_t i = 0; i < kids.size(); ++i) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      out[i].status = wait_or_kill(kids[i].pid, std::max(left, 100ms));
    }
    return out;
  }

  static std::string dump(const std::vector<NodeResult>& nodes) {
    std::string s;
    for (std::size_t i = 0; i < nodes.size(); ++i)
      s += "--- node process " + std::to_string(i) + " (status " + std::to_string(nodes[i].status) + ")\n" + nodes[i].output;
    return s;
  }

  // Every peer rank 0..total-1 printed OK with `ops` ops, and every process exited 0.
  static void expect_all_ok(const std::vector<NodeResult>& nodes, int total, int ops) {
    auto lines = peer_lines(nodes);
    EXPECT_EQ(lines.size(), static_cast<std::size_t>(total)) << dump(nodes);
    for (int r = 0; r < total; ++r) {
      auto it = lines.find(std::to_string(r));
      ASSERT_NE(it, lines.end()) << "peer " << r << " printed nothing\n" << dump(nodes);
      EXPECT_TRUE(it->second.ok) << "peer " << r << ": " << it->second.code << " " << it->second.message;
      EXPECT_EQ(it->second.ops, ops) << "peer " << r;
    }
    for (const auto& n : nodes) EXPECT_TRUE(n.exited_ok()) << dump(nodes);
  }

  ChildGuard orch_;
  uint16_t port_ = 0;

  // 3 nodes x 2 peers run `scenario`, in which node 1 (rank 3) cannot run the first op: every
  // peer must get the same error (`code`, containing `says`), at once rather than after the
  // nodes' 10 s op timeout, and the op after it must work (the scenario checks that).
  void expect_node_failure_everywhere(const std::string& scenario, const std::string& code, const std::string& says) {
    start_orchestrator(3);
    const auto t0 = std::chrono::steady_clock::now();
    auto nodes = run_nodes({{}, {}, {}}, {"--peers", "2", "--scenario", scenario, "--victim", "3"});
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));  // each node lingers 1 s
    auto lines = peer_lines(nodes);
    ASSERT_EQ(lines.size(), 6u) << dump(nodes);
    const std::string& first = lines.begin()->second.message;
    for (auto& [rank, p] : lines) {
      EXPECT_EQ(p.code, code) << "peer " << rank << ": " << p.message;
      EXPECT_EQ(p.message, first) << "peer " << rank;
      EXPECT_NE(p.message.find(says), std::string::npos) << p.message;
    }
  }
};

constexpr int kEveryOpCount = 260;  // multi_node_peer.cpp: 3 roots x 4 sizes x 13 ops + 104 dtype/redop cases

class EveryOpAcrossNodes : public MultiNode, public ::testing::WithParamInterface<const char*> {};

TEST_P(EveryOpAcrossNodes, ThreeNodesTimesTwoPeers) {
  start_orchestrator(3);
  auto nodes = run_nodes({{}, {}, {}}, {"--peers", "2", "--scenario", "every-op", "--strategy", GetParam()});
  expect_all_ok(nodes, 6, kEveryOpCount);
}

INSTANTIATE_TEST_SUITE_P(Strategies, EveryOpAcrossNodes,
                         ::testing::Values("auto", "ring", "tree:3", "centralized", "dbtree", "direct"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (auto& c : s)
                             if (c == ':') c = '_';
                           return s;
                         });

TEST_F(MultiNode, UnevenPeersPerNode) {
  start_orchestrator(3);
  auto nodes = run_nodes({{"--peers", "1"}, {"--peers", "3"}, {"--peers", "2"}}, {"--scenario", "every-op"});
  expect_all_ok(nodes, 6, kEveryOpCount);
}

TEST_F(MultiNode, TwoNodesOnePeerEach) {
  start_orchestrator(2);
  auto nodes = run_nodes({{}, {}}, {"--peers", "1", "--scenario", "every-op"});
  expect_all_ok(nodes, 2, kEveryOpCount);
}

// Every peer in its own process, more than two of them: small all-reduces run one-shot (every node
// folds every buffer in rank order), with every dtype and reduce op.
TEST_F(MultiNode, FourNodesOnePeerEach) {
  start_orchestrator(4);
  auto nodes = run_nodes({{}, {}, {}, {}}, {"--peers", "1", "--scenario", "every-op"});
  expect_all_ok(nodes, 4, kEveryOpCount);
}

// What every peer reads from Peer::last_strategy is what the tuning module picks for the topology:
// hierarchical with several peers per node, flat (one-shot, or a star where the node processes
// crowd this machine) with one.
TEST_F(MultiNode, EveryPeerReportsTheStrategyTheTuningModulePicks) {
  start_orchestrator(2);
  auto nodes = run_nodes({{}, {}}, {"--peers", "2", "--scenario", "strategies"});
  expect_all_ok(nodes, 4, 10);
}

TEST_F(MultiNode, EveryPeerReportsTheStrategyTheTuningModulePicksWithOnePeerPerNode) {
  start_orchestrator(3);
  auto nodes = run_nodes({{}, {}, {}}, {"--peers", "1", "--scenario", "strategies"});
  expect_all_ok(nodes, 3, 10);
}

TEST_F(MultiNode, GroupsAcrossNodes) {
  start_orchestrator(3);
  auto nodes = run_nodes({{}, {}, {}}, {"--peers", "2", "--scenario", "groups"});
  expect_all_ok(nodes, 6, 20 + 1 + 13 + 2 + 4 + 1);
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

TEST_F(MultiNode, GradientSyncAcrossNodes) {
  start_orchestrator(2);
  auto nodes = run_nodes({{"--peers", "2"}, {"--peers", "1"}}, {"--scenario", "gradsync"});
  expect_all_ok(nodes, 3, 20);
}

TEST_F(MultiNode, AThousandConsecutiveMixedOps) {
  start_orchestrator(3);
  auto nodes = run_nodes({{}, {}, {}}, {"--peers", "2", "--scenario", "mixed", "--ops", "1000"}, 120000ms);
  expect_all_ok(nodes, 6, 1000);
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

TEST_F(MultiNode, KilledNodeIsReportedByEverySurvivorAndTheOrchestratorServesTheNextCollective) {
  start_orchestrator(3);
  auto t0 = std::chrono::steady_clock::now();
  auto nodes = run_nodes({{}, {}, {}}, {"--peers", "2", "--scenario", "kill", "--victim", "2", "--at-op", "20",
                                        "--timeout-ms", "5000"});
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
  // The daemon is still up and admits a fresh collective.
  auto again = run_nodes({{}, {}, {}}, {"--peers", "2", "--scenario", "mixed", "--ops", "50"});
  expect_all_ok(again, 6, 50);
}

TEST_F(MultiNode, APeerThatNeverCallsIsNamedByItsNodeAndItsNodeByTheOthers) {
  start_orchestrator(3);
  auto nodes = run_nodes({{}, {}, {}}, {"--peers", "2", "--scenario", "skip", "--victim", "3", "--at-op", "5",
                                        "--timeout-ms", "1500"});
  auto lines = peer_lines(nodes);
  ASSERT_EQ(lines.size(), 6u) << dump(nodes);
  for (auto& [rank, p] : lines) {
    if (rank == "3") continue;  // the one that stopped
    EXPECT_EQ(p.code, "timeout") << "peer " << rank << ": " << p.message;
    if (rank == "2")  // its node-mate waits in the local server for rank 3
      EXPECT_NE(p.message.find("peer 3 never called"), std::string::npos) << p.message;
    else
      EXPECT_NE(p.message.find("node 1 never called"), std::string::npos) << "peer " << rank << ": " << p.message;
  }
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
  }
  EXPECT_EQ(survivors, 4) << dump(nodes);
  // The surviving processes exited by themselves (the frozen one was killed at the limit).
  int exited = 0;
  for (auto& n : nodes) exited += n.status >= 0 ? 1 : 0;
  EXPECT_EQ(exited, 2) << dump(nodes);
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

// TLS: a CA signs the daemon's and the nodes' certificates; nodes with them run (the control
// channel and every data connection between the three nodes are TLS), a node without TLS or with a
// certificate from another CA is turned away with an error.
TEST_F(MultiNode, TlsWithMutuallyAuthenticatedCertificates) {
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) GTEST_SKIP() << "no openssl command to make certificates";
  char tmpl[] = "/tmp/chorus-tls-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string d = tmpl;
  auto make_ca = [&](const std::string& name) {
    return "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=" + name + " -keyout " + d + "/" + name +
           ".key -out " + d + "/" + name + ".pem";
  };
  auto make_cert = [&](const std::string& name, const std::string& ca) {
    return "openssl req -newkey rsa:2048 -nodes -subj /CN=" + name + " -keyout " + d + "/" + name + ".key -out " + d +
           "/" + name + ".csr && openssl x509 -req -days 2 -in " + d + "/" + name + ".csr -CA " + d + "/" + ca +
           ".pem -CAkey " + d + "/" + ca + ".key -CAcreateserial -out " + d + "/" + name + ".pem";
  };
  const std::string script = make_ca("ca") + " && " + make_ca("otherca") + " && " + make_cert("orch", "ca") + " && " +
                             make_cert("node", "ca") + " && " + make_cert("stranger", "otherca");
  ASSERT_EQ(std::system(("(" + script + ") >/dev/null 2>&1").c_str()), 0);
  auto files = [&](const std::string& who, const std::string& ca) {
    return std::vector<std::string>{"--tls-cert", d + "/" + who + ".pem", "--tls-key", d + "/" + who + ".key",
                                    "--tls-ca", d + "/" + ca + ".pem"};
  };
  start_orchestrator(3, files("orch", "ca"));
  auto nodes = run_nodes({files("node", "ca"), files("node", "ca"), files("node", "ca")},
                         {"--peers", "2", "--scenario", "mixed", "--ops", "50", "--timeout-ms", "5000"});
  expect_all_ok(nodes, 6, 50);
  // Turned away, each with an error and within its timeout: no TLS at all, and a foreign CA.
  for (auto extra : {std::vector<std::string>{}, files("stranger", "otherca")}) {
    auto t0 = std::chrono::steady_clock::now();
    extra.insert(extra.end(), {"--nodes", "3", "--peers", "1", "--scenario", "mixed", "--ops", "5", "--timeout-ms", "2000"});
    auto bad = run_nodes({extra}, {}, 15000ms);
    EXPECT_FALSE(bad[0].exited_ok()) << dump(bad);
    EXPECT_NE(bad[0].output.find("PEER ? ERR"), std::string::npos) << dump(bad);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 10000ms) << dump(bad);
  }
  std::system(("rm -rf " + d).c_str());
}

// Nodes on their own hosts: one network namespace per node plus one for the orchestrator, joined
// by veth pairs on a bridge, each with its own address. Needs root (and iproute2).
TEST_F(MultiNode, NodesInSeparateNetworkNamespaces) {
  if (geteuid() != 0) GTEST_SKIP() << "not root: cannot create network namespaces";
  const std::string pfx = "chorus" + std::to_string(getpid() % 100000);
  auto sh = [](const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; };
  auto cleanup = [&] {
    for (const char* n : {"h", "a", "b"}) sh("ip netns del " + pfx + n);
  };
  cleanup();
  bool ok = sh("ip netns add " + pfx + "h") && sh("ip netns add " + pfx + "a") && sh("ip netns add " + pfx + "b") &&
            sh("ip -n " + pfx + "h link add br0 type bridge") && sh("ip -n " + pfx + "h link set br0 up") &&
            sh("ip -n " + pfx + "h addr add 10.77.0.254/24 dev br0") && sh("ip -n " + pfx + "h link set lo up");
  int host = 1;
  for (const char* n : {"a", "b"}) {
    const std::string ns = pfx + n, dev = std::string("v") + n;
    ok = ok && sh("ip -n " + pfx + "h link add " + dev + " type veth peer name eth0 netns " + ns) &&
         sh("ip -n " + pfx + "h link set " + dev + " master br0 up") &&
         sh("ip -n " + ns + " addr add 10.77.0." + std::to_string(host++) + "/24 dev eth0") &&
         sh("ip -n " + ns + " link set eth0 up") && sh("ip -n " + ns + " link set lo up");
  }
  if (!ok) {
    cleanup();
    GTEST_SKIP() << "this machine does not allow network namespaces with veth pairs";
  }
  // The orchestrator inside the hub namespace, listening on the bridge address.
  auto [opid, oport, error] = testkit::start_orchestrator({"--port", "0", "--nodes", "2", "--host", "10.77.0.254", "--heartbeat-ms", "200"},
                                                20s, {"/usr/sbin/ip", "netns", "exec", pfx + "h"});
  orch_.pid = opid;
  ASSERT_GT(opid, 0) << "the orchestrator did not start in its namespace: " << error;
  std::vector<Child> kids;
  int host_id = 1;
  for (const char* n : {"a", "b"}) {
    kids.push_back(spawn("/usr/sbin/ip",
                         {"netns", "exec", pfx + n, node_path(), "--orchestrator", "10.77.0.254:" + std::to_string(oport),
                          "--nodes", "2", "--address", "10.77.0." + std::to_string(host_id++), "--peers", "2",
                          "--scenario", "mixed", "--ops", "200", "--timeout-ms", "10000"},
                         Output::pipe_with_stderr));
  }
  std::vector<NodeResult> nodes(2);
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  std::thread r0([&] { nodes[0].output = read_all(kids[0].out, deadline); });
  nodes[1].output = read_all(kids[1].out, deadline);
  r0.join();
  for (int i = 0; i < 2; ++i) nodes[i].status = wait_or_kill(kids[i].pid, 5000ms);
  kill(opid, SIGTERM);
  wait_or_kill(opid, 5000ms);
  orch_.pid = -1;
  cleanup();
  expect_all_ok(nodes, 4, 200);
}

} // namespace
} // namespace chorus
