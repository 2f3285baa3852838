// What the multi-process tests share (multi_node_test.cpp: failures; multi_node_ops_test.cpp:
// everything works): the orchestrator daemon and node processes (chorus-test-node, see
// multi_node_peer.cpp) on loopback, the "PEER r ..." lines the nodes print, read as they come
// (TimedOutput), and the word that lets the nodes exit once all are done.
#pragma once
#include <gtest/gtest.h>

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "testkit/process.hpp"

namespace chorus::multi_node {

using namespace chorus::testkit;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Under ASan the node processes' work runs 5-10x slower (200 soak ops: 3.4 s plain, 34 s alone
// under ASan, near 60 s beside another suite): a bound on how long work takes, not on how soon a
// fault is noticed, stretches by this.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr int kWorkSlowdown = 3;
#else
inline constexpr int kWorkSlowdown = 1;
#endif

// The node processes' output as it comes, line by line, with the time each line arrived: for tests
// that act between lines (kill a node once the others say they are in place) and time the answers.
class TimedOutput {
 public:
  struct Line {
    std::size_t node;  // which process (index into the children)
    std::string text;
    Clock::time_point at;
  };
  explicit TimedOutput(const std::vector<Child>& kids) : partial_(kids.size()) {
    for (const auto& k : kids) fds_.push_back(k.out);
  }
  ~TimedOutput() {
    for (int fd : fds_)
      if (fd >= 0) close(fd);
  }
  // Reads until done() holds, every output has ended or the deadline passed; returns done().
  template <class Done>
  bool read_until(Done done, Clock::time_point deadline) {
    while (!done()) {
      std::vector<pollfd> ps;
      std::vector<std::size_t> which;
      for (std::size_t i = 0; i < fds_.size(); ++i)
        if (fds_[i] >= 0) {
          ps.push_back({fds_[i], POLLIN, 0});
          which.push_back(i);
        }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (ps.empty() || left <= 0) return done();
      if (poll(ps.data(), ps.size(), static_cast<int>(std::min<long long>(left, 1000))) < 0 && errno != EINTR)
        return done();
      for (std::size_t k = 0; k < ps.size(); ++k)
        if (ps[k].revents) take(which[k]);
    }
    return true;
  }
  // The first line starting with `prefix`, or null.
  const Line* find(const std::string& prefix) const {
    for (const auto& l : lines_)
      if (l.text.rfind(prefix, 0) == 0) return &l;
    return nullptr;
  }
  // Whether `node`'s output has ended (it exited, or closed it).
  bool ended(std::size_t node) const { return fds_[node] < 0; }
  // The first line of `node` that contains `part`, or null.
  const Line* line_of(std::size_t node, const std::string& part) const {
    for (const auto& l : lines_)
      if (l.node == node && l.text.find(part) != std::string::npos) return &l;
    return nullptr;
  }
  // Whether a line of `node` contains `part`.
  bool said(std::size_t node, const std::string& part) const { return line_of(node, part) != nullptr; }
  // Everything `node` printed so far.
  std::string output_of(std::size_t node) const {
    std::string s;
    for (const auto& l : lines_)
      if (l.node == node) s += l.text + "\n";
    return s + partial_[node];
  }
  std::string dump() const {
    std::string s;
    for (const auto& l : lines_) s += "[node process " + std::to_string(l.node) + "] " + l.text + "\n";
    return s;
  }

 private:
  void take(std::size_t i) {
    char buf[4096];
    const ssize_t n = read(fds_[i], buf, sizeof(buf));
    if (n <= 0) {
      if (n < 0 && errno == EINTR) return;
      close(fds_[i]);
      fds_[i] = -1;
      return;
    }
    const auto now = Clock::now();
    partial_[i].append(buf, static_cast<std::size_t>(n));
    for (std::size_t nl; (nl = partial_[i].find('\n')) != std::string::npos; partial_[i].erase(0, nl + 1))
      lines_.push_back({i, partial_[i].substr(0, nl), now});
  }
  std::vector<int> fds_;
  std::vector<std::string> partial_;
  std::vector<Line> lines_;
};


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

// The shared-memory segments a node process mapped while in the collective ("NODE SHM n": one
// per data connection to a node of its own host), or -1 when it did not say.
inline int shm_segments(const NodeResult& n) {
  const auto at = n.output.find("NODE SHM ");
  return at == std::string::npos ? -1 : std::atoi(n.output.c_str() + at + 9);
}

// What /dev/shm holds (chorus's segments are memfds: nothing of theirs may ever show up there).
inline std::set<std::string> dev_shm_entries() {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) names.insert(e.path().filename());
  return names;
}

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

  ~MultiNode() override { tell_nodes_to_exit(); }

  // Starts one node process per entry of `per_node` (its extra flags), all with `common`, their
  // output (stderr included) on a pipe each. Each stays in the collective after its peers' lines
  // ("NODE DONE") until told to exit (tell_nodes_to_exit): a node that left while the others were
  // still noticing what went wrong would change what they see ("left" instead).
  std::vector<Child> spawn_nodes(const std::vector<std::vector<std::string>>& per_node,
                                 const std::vector<std::string>& common) {
    std::vector<Child> kids;
    for (const auto& extra : per_node) {
      std::vector<std::string> args{"--orchestrator", "127.0.0.1:" + std::to_string(port_),
                                    "--nodes", std::to_string(per_node.size()), "--exit-when-told", "1"};
      args.insert(args.end(), common.begin(), common.end());
      args.insert(args.end(), extra.begin(), extra.end());
      kids.push_back(spawn(node_path(), args, Output::pipe_with_stderr, {}, Input::pipe));
      told_.push_back(kids.back().in);
    }
    return kids;
  }
  // Lets every node process started so far exit (closes their stdin). Idempotent.
  void tell_nodes_to_exit() {
    for (int fd : told_)
      if (fd >= 0) close(fd);
    told_.clear();
  }

  // Runs the node processes of spawn_nodes and collects their output; processes still running
  // after `limit` are killed. Once every node is done (said NODE DONE, ended, or is a victim that
  // will say nothing more: killed or frozen by its scenario), they are told to exit; a frozen
  // victim is killed once the others have ended (status -1, as at the limit).
  std::vector<NodeResult> run_nodes(const std::vector<std::vector<std::string>>& per_node,
                                    const std::vector<std::string>& common,
                                    std::chrono::milliseconds limit = 60000ms) {
    std::vector<Child> kids = spawn_nodes(per_node, common);
    const auto deadline = Clock::now() + limit;
    TimedOutput out(kids);
    auto every_node = [&](auto done) {
      return [&out, &kids, done] {
        for (std::size_t i = 0; i < kids.size(); ++i)
          if (!done(i)) return false;
        return true;
      };
    };
    out.read_until(every_node([&out](std::size_t i) {
                     return out.ended(i) || out.said(i, "NODE DONE") || out.said(i, " VICTIM");
                   }),
                   deadline);
    tell_nodes_to_exit();
    out.read_until(every_node([&out](std::size_t i) { return out.ended(i) || out.said(i, " VICTIM"); }), deadline);
    std::vector<NodeResult> results(kids.size());
    for (std::size_t i = 0; i < kids.size(); ++i) {
      results[i].output = out.output_of(i);
      if (!out.ended(i) && out.said(i, " VICTIM")) {  // frozen: it would wait out the limit
        ::kill(kids[i].pid, SIGKILL);
        (void)wait_or_kill(kids[i].pid, 5000ms);
        results[i].status = -1;
        continue;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      results[i].status = wait_or_kill(kids[i].pid, std::max(left, 100ms));
    }
    return results;
  }

 public:  // for the tests' own helpers too
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
  std::vector<int> told_;  // the node processes' stdin, open until they may exit

  // 3 nodes x 2 peers run `scenario`, in which node 1 (rank 3) cannot run the first op: every
  // peer must get the same error (`code`, containing `says`), at once rather than after the
  // nodes' 10 s op timeout, and the op after it must work (the scenario checks that).
  void expect_node_failure_everywhere(const std::string& scenario, const std::string& code, const std::string& says) {
    start_orchestrator(3);
    const auto t0 = std::chrono::steady_clock::now();
    auto nodes = run_nodes({{}, {}, {}}, {"--peers", "2", "--scenario", scenario, "--victim", "3"});
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
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
