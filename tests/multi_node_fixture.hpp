// What the multi-process tests share (multi_node_test.cpp: failures; multi_node_ops_test.cpp:
// everything works): the orchestrator daemon and node processes (chorus-test-node, see
// multi_node_peer.cpp) on loopback, and the "PEER r ..." lines the nodes print.
#pragma once
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <chrono>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "testkit/process.hpp"

namespace chorus::multi_node {

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
inline std::map<std::string, PeerLine> peer_lines(const std::vector<NodeResult>& nodes) {
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
    std::vector<std::string> args{"--port", "0", "--nodes", std::to_string(nodes), "--heartbeat-ms", "1000"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto [pid, port, error] = testkit::start_orchestrator(args);
    orch_.pid = pid;
    port_ = port;
    ASSERT_GT(pid, 0) << error;
  }

  // Starts one node process per entry of `per_node` (its extra flags), all with `common`, their
  // output (stderr included) on a pipe each.
  std::vector<Child> spawn_nodes(const std::vector<std::vector<std::string>>& per_node,
                                 const std::vector<std::string>& common) {
    std::vector<Child> kids;
    for (const auto& extra : per_node) {
      std::vector<std::string> args{"--orchestrator", "127.0.0.1:" + std::to_string(port_),
                                    "--nodes", std::to_string(per_node.size())};
      args.insert(args.end(), common.begin(), common.end());
      args.insert(args.end(), extra.begin(), extra.end());
      kids.push_back(spawn(node_path(), args, Output::pipe_with_stderr));
    }
    return kids;
  }

  // Runs the node processes of spawn_nodes and collects their output; processes still running
  // after `limit` are killed.
  std::vector<NodeResult> run_nodes(const std::vector<std::vector<std::string>>& per_node,
                                    const std::vector<std::string>& common,
                                    std::chrono::milliseconds limit = 60000ms) {
    std::vector<Child> kids = spawn_nodes(per_node, common);
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

} // namespace chorus::multi_node
