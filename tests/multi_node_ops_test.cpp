// Multi-process tests on loopback in which everything must work: the orchestrator daemon and
// several node processes (chorus-test-node) run every op across nodes with every strategy (through
// shared memory, the processes being on one host, and with the network forced), many consecutive
// ops, uneven peers per node, groups, gradient sync, TLS between all of them, and (as root only) a
// job of two hosts in their own network namespaces.
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "multi_node_fixture.hpp"

namespace chorus::multi_node {
namespace {

constexpr int kEveryOpCount = 266;  // multi_node_peer_ops.cpp: 3 roots x 4 sizes x 13 ops + 104 dtype/redop cases + 6 large

class EveryOpAcrossNodes : public MultiNode, public ::testing::WithParamInterface<const char*> {};

TEST_P(EveryOpAcrossNodes, ThreeNodesTimesTwoPeers) {
  start_orchestrator(3);
  auto nodes = run_nodes({{}, {}, {}}, {"--peers", "2", "--scenario", "every-op", "--strategy", GetParam()});
  expect_all_ok(nodes, 6, kEveryOpCount);
  // The three processes are on one host: every pair went through shared memory.
  for (const auto& n : nodes) EXPECT_EQ(shm_segments(n), 2) << dump(nodes);
}

// The same between processes of one host with the network forced (Config::host_transport):
// every byte through the sockets, as between hosts.
TEST_P(EveryOpAcrossNodes, ThreeNodesTimesTwoPeersOverTheNetwork) {
  start_orchestrator(3);
  auto nodes = run_nodes({{}, {}, {}}, {"--peers", "2", "--scenario", "every-op", "--strategy", GetParam(),
                                        "--transport", "network"});
  expect_all_ok(nodes, 6, kEveryOpCount);
  for (const auto& n : nodes) EXPECT_EQ(shm_segments(n), 0) << dump(nodes);
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

// The same over the sockets: large all-reduces run the ring of the two nodes, both of its receives
// landing straight in the work buffer (strategies/early_receives.hpp).
TEST_F(MultiNode, TwoNodesOnePeerEachOverTheNetwork) {
  start_orchestrator(2);
  auto nodes = run_nodes({{}, {}}, {"--peers", "1", "--scenario", "every-op", "--transport", "network"});
  expect_all_ok(nodes, 2, kEveryOpCount);
  for (const auto& n : nodes) EXPECT_EQ(shm_segments(n), 0) << dump(nodes);
}

// And a ring of four over the sockets: all-gather regions the reduce-scatter read are offered once
// the round that read them is over.
TEST_F(MultiNode, FourNodesOnePeerEachOverTheNetwork) {
  start_orchestrator(4);
  auto nodes = run_nodes({{}, {}, {}, {}}, {"--peers", "1", "--scenario", "every-op", "--transport", "network"});
  expect_all_ok(nodes, 4, kEveryOpCount);
  for (const auto& n : nodes) EXPECT_EQ(shm_segments(n), 0) << dump(nodes);
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
// The nodes' small ops meet in the arena; a peer held up longer than the arena waits (a loaded
// machine) would send one the ordinary way, so here the arena waits up to a quarter of the timeout.
TEST_F(MultiNode, EveryPeerReportsTheStrategyTheTuningModulePicks) {
  start_orchestrator(2);
  setenv("CHORUS_ARENA_WAIT_MS", "60000", 1);
  auto nodes = run_nodes({{}, {}}, {"--peers", "2", "--scenario", "strategies"});
  unsetenv("CHORUS_ARENA_WAIT_MS");
  expect_all_ok(nodes, 4, 10);
}

TEST_F(MultiNode, EveryPeerReportsTheStrategyTheTuningModulePicksWithOnePeerPerNode) {
  start_orchestrator(3);
  setenv("CHORUS_ARENA_WAIT_MS", "60000", 1);
  auto nodes = run_nodes({{}, {}, {}}, {"--peers", "1", "--scenario", "strategies"});
  unsetenv("CHORUS_ARENA_WAIT_MS");
  expect_all_ok(nodes, 3, 10);
}

TEST_F(MultiNode, GroupsAcrossNodes) {
  start_orchestrator(3);
  auto nodes = run_nodes({{}, {}, {}}, {"--peers", "2", "--scenario", "groups"});
  expect_all_ok(nodes, 6, 20 + 1 + 13 + 2 + 4 + 1);
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

// Data connections sealed by the secret (Config::seal_data), without certificates: three node
// processes over the sockets run mixed ops through TLS keyed by the secret and the job's token; a
// node that does not seal is refused, naming the setting.
TEST_F(MultiNode, DataConnectionsSealedByTheSecret) {
  start_orchestrator(3, {"--secret", "s3"});
  const std::vector<std::string> common{"--peers", "1",        "--secret",   "s3",    "--transport",
                                        "network", "--scenario", "mixed", "--ops", "50"};
  auto sealed = common;
  sealed.insert(sealed.end(), {"--seal-data", "1"});
  auto nodes = run_nodes({{}, {}, {}}, sealed);
  expect_all_ok(nodes, 3, 50);
  // Registered against a sealed job's first node, a node that does not seal is turned away (and
  // one that comes after the failed admission waits for a new one until its timeout).
  auto quick = common;
  quick.insert(quick.end(), {"--timeout-ms", "2000"});
  auto mixed = run_nodes({{"--seal-data", "1"}, {"--seal-data", "0"}, {"--seal-data", "1"}}, quick);
  bool named = false;
  for (const auto& n : mixed) named = named || n.output.find("seal_data") != std::string::npos;
  EXPECT_TRUE(named) << dump(mixed);
  for (const auto& n : mixed) EXPECT_FALSE(n.exited_ok()) << dump(mixed);
}

// A job of two hosts with two node processes each: a network namespace per host plus one for the
// orchestrator, joined by veth pairs on a bridge, each with its own address. The processes of a
// host share memory, the hosts talk through the network. Needs root (and iproute2).
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
  auto [opid, oport, error] = testkit::start_orchestrator({"--port", "0", "--nodes", "4", "--host", "10.77.0.254", "--heartbeat-ms", "500"},
                                                20s, {"/usr/sbin/ip", "netns", "exec", pfx + "h"});
  orch_.pid = opid;
  ASSERT_GT(opid, 0) << "the orchestrator did not start in its namespace: " << error;
  std::vector<Child> kids;
  for (int k = 0; k < 4; ++k) {
    const char* n = k < 2 ? "a" : "b";
    kids.push_back(spawn("/usr/sbin/ip",
                         {"netns", "exec", pfx + n, node_path(), "--orchestrator", "10.77.0.254:" + std::to_string(oport),
                          "--nodes", "4", "--address", std::string("10.77.0.") + (k < 2 ? "1" : "2"), "--peers", "2",
                          "--scenario", "mixed", "--ops", "200", "--timeout-ms", "10000"},
                         Output::pipe_with_stderr));
  }
  std::vector<NodeResult> nodes(4);
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  std::vector<std::thread> readers;
  for (int k = 0; k < 4; ++k) readers.emplace_back([&, k] { nodes[k].output = read_all(kids[k].out, deadline); });
  for (auto& r : readers) r.join();
  for (int i = 0; i < 4; ++i) nodes[i].status = wait_or_kill(kids[i].pid, 5000ms);
  kill(opid, SIGTERM);
  wait_or_kill(opid, 5000ms);
  orch_.pid = -1;
  cleanup();
  expect_all_ok(nodes, 8, 200);
  for (const auto& n : nodes) EXPECT_EQ(shm_segments(n), 1) << "one node of its own host\n" << dump(nodes);
}

} // namespace
} // namespace chorus::multi_node
