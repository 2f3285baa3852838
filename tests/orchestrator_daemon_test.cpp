// The chorus-orchestrator daemon as its own process: it serves nodes and stops cleanly, reads its
// options from the command line and a config file (and rejects bad ones with exit status 2),
// names only the public API in --help, reports frozen and killed node processes
// (chorus-test-orchestrator-node, orchestrator_node.cpp) and is noticed when frozen itself; and
// chorus-ctl status takes the daemon's secret from CHORUS_SECRET or a file.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "actors/global_client/node_session.hpp"
#include "orchestrator_fixtures.hpp"
#include "status_matchers.hpp"
#include "test_events.hpp"
#include "testkit/process.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;
using namespace chorus::testing;
using namespace chorus::testkit;

// A program's stdout and stderr and its exit status for `args` and the extra environment `env`
// (it is expected to exit at once): the daemon's, or chorus-ctl's.
struct DaemonRun {
  int status = -1;
  std::string output;
  bool exited_with(int code) const { return status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == code; }
};
DaemonRun run_program(const std::string& path, const std::vector<std::string>& args,
                      const std::vector<std::string>& env = {}) {
  const Child child = spawn(path, args, Output::pipe_with_stderr, env);
  DaemonRun r;
  if (child.pid < 0) return r;
  r.output = read_all(child.out, std::chrono::steady_clock::now() + 5s);
  r.status = wait_or_kill(child.pid, 5000ms);
  return r;
}
DaemonRun run_daemon(const std::vector<std::string>& args) { return run_program(orchestrator_path(), args); }

TEST(OrchestratorDaemon, ServesNodesAndStopsCleanlyOnSigterm) {
  auto [pid, port, error] = start_orchestrator({"--port", "0", "--nodes", "2", "--secret", "s3", "--timeout-ms", "3000"});
  ChildGuard guard{pid};
  ASSERT_GT(pid, 0) << error;
  ASSERT_NE(port, 0) << "the daemon did not report its port";
  {
    EventCount a_lost;  // before the systems: their node actors call it until they are gone
    System a, b;
    Result<std::shared_ptr<NodeSession>> ra = Status(Errc::internal, "not run");
    std::thread t([&] {
      ra = NodeSession::join(*a.sys, "127.0.0.1", port, reg(2, 2, "127.0.0.1:7001"), 3000ms,
                             [&a_lost](const NodeLostData&) { a_lost.raise(); });
    });
    auto rb = NodeSession::join(*b.sys, "127.0.0.1", port, reg(2, 1, "127.0.0.1:7002"), 3000ms);
    t.join();
    ASSERT_TRUE(ra) << ra.status().to_string();
    ASSERT_TRUE(rb) << rb.status().to_string();
    EXPECT_EQ((*ra)->topology().total_peers, 3u);
    // Stop the daemon while both nodes are connected members: it exits promptly and cleanly,
    // and the nodes notice that the orchestrator is gone.
    kill(pid, SIGTERM);
    int status = wait_or_kill(pid, 5000ms);
    guard.pid = -1;  // reaped
    ASSERT_NE(status, -1) << "the daemon hung at shutdown";
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    EXPECT_TRUE(a_lost.wait_for(1, 3s));
    ASSERT_FALSE((*ra)->lost().empty());
    EXPECT_NE((*ra)->lost()[0].reason.find("orchestrator lost"), std::string::npos) << (*ra)->lost()[0].reason;
    (*ra)->leave();
    (*rb)->leave();
  }
}

TEST(OrchestratorDaemon, RejectsBadFlags) {
  auto run = [](const std::vector<std::string>& args) { return run_daemon(args).status; };
  int s = run({"--nodes", "0", "--port", "0"});
  EXPECT_TRUE(WIFEXITED(s) && WEXITSTATUS(s) == 2) << s;
  s = run({"--port", "0"});
  EXPECT_TRUE(WIFEXITED(s) && WEXITSTATUS(s) == 2) << s;
  s = run({"--help"});
  EXPECT_TRUE(WIFEXITED(s) && WEXITSTATUS(s) == 0) << s;
}

// A config file for the daemon (name=value lines) in the test's temporary directory.
std::string write_config(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "chorus-orch-" + std::to_string(getpid()) + "-" + name + ".ini";
  std::ofstream(path) << text;
  return path;
}

TEST(OrchestratorDaemon, HelpListsEveryOption) {
  auto r = run_daemon({"--help"});
  EXPECT_TRUE(r.exited_with(0)) << r.status << "\n" << r.output;
  for (const char* opt : {"--port=", "--nodes=", "--host=", "--secret=", "--timeout-ms=", "--heartbeat-ms=",
                          "--handshake-ms=", "--tls-cert=", "--tls-key=", "--tls-ca=", "--config-file="})
    EXPECT_NE(r.output.find(opt), std::string::npos) << opt << " is missing from --help:\n" << r.output;
  EXPECT_NE(r.output.find("CHORUS_SECRET"), std::string::npos) << r.output;
  // How nodes join, in the installed headers' words only (configure_remoting is internal).
  EXPECT_EQ(r.output.find("configure_remoting"), std::string::npos) << r.output;
  for (const char* api : {"chorus::Runtime", "chorus::Config", "num_nodes", "orchestrator_address", "node_address"})
    EXPECT_NE(r.output.find(api), std::string::npos) << api << " is missing from --help:\n" << r.output;
}

// chorus-ctl status against a daemon with a secret: the secret from CHORUS_SECRET or
// --secret-file (a file wins over the environment), and with none at all "no secret given", not
// "wrong secret".
TEST(OrchestratorDaemon, CtlTakesTheSecretFromTheEnvironmentOrAFile) {
  auto [pid, port, error] = start_orchestrator({"--port", "0", "--nodes", "2", "--secret", "s3"});
  ChildGuard guard{pid};
  ASSERT_GT(pid, 0) << error;
  ASSERT_NE(port, 0) << "the daemon did not report its port";
  unsetenv("CHORUS_SECRET");  // chorus-ctl gets our environment and what each run adds
  const auto right = write_config("secret-right", "s3\n"), wrong = write_config("secret-wrong", "guess\n");
  auto ctl = [&, port = port](std::vector<std::string> args, const std::vector<std::string>& env = {}) {
    const std::vector<std::string> query{"status", "--orchestrator", "127.0.0.1:" + std::to_string(port), "--timeout-ms",
                                         "5000"};
    args.insert(args.begin(), query.begin(), query.end());
    return run_program(sibling("chorus-ctl"), args, env);
  };
  for (const auto& [args, env] : std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>>{
           {{}, {"CHORUS_SECRET=s3"}}, {{"--secret-file", right}, {}}, {{"--secret-file", right}, {"CHORUS_SECRET=guess"}}}) {
    auto r = ctl(args, env);
    EXPECT_TRUE(r.exited_with(0)) << r.status << "\n" << r.output;
    EXPECT_NE(r.output.find("0 of 2 nodes registered so far"), std::string::npos) << r.output;
  }
  auto none = ctl({});
  EXPECT_TRUE(none.exited_with(1)) << none.status << "\n" << none.output;
  EXPECT_NE(none.output.find("no secret given"), std::string::npos) << none.output;
  EXPECT_EQ(none.output.find("wrong secret"), std::string::npos) << none.output;
  for (const auto& [args, env] : std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>>{
           {{}, {"CHORUS_SECRET=guess"}}, {{"--secret-file", wrong}, {}}}) {
    auto r = ctl(args, env);
    EXPECT_TRUE(r.exited_with(1)) << r.status << "\n" << r.output;
    EXPECT_NE(r.output.find("wrong secret"), std::string::npos) << r.output;
  }
  auto unreadable = ctl({"--secret-file", right + ".absent"});
  EXPECT_TRUE(unreadable.exited_with(1)) << unreadable.status << "\n" << unreadable.output;
  EXPECT_NE(unreadable.output.find("cannot read the secret from " + right + ".absent"), std::string::npos)
      << unreadable.output;
  std::remove(right.c_str());
  std::remove(wrong.c_str());
}

// Every option can come from a config file, and the command line overrides the file: the file
// says 3 nodes, the command line 2, so two nodes complete a collective; the secret is the file's.
TEST(OrchestratorDaemon, ConfigFileSetsTheOptions) {
  const auto file = write_config("good", "port=0\nnodes=3\nhost=\"127.0.0.1\"\nsecret=\"from-file\"\n"
                                         "timeout-ms=3000\nheartbeat-ms=200\n");
  auto [pid, port, error] = start_orchestrator({"--config-file", file, "--nodes", "2"});
  ChildGuard guard{pid};
  ASSERT_GT(pid, 0) << error;
  ASSERT_NE(port, 0) << "the daemon did not start from its config file";
  System a, b, c;
  auto wrong = NodeSession::join(*c.sys, "127.0.0.1", port, reg(2, 1, "127.0.0.1:7003"), 3000ms);
  EXPECT_TRUE(has(wrong.status(), Errc::auth_failed, {"wrong secret"}));  // "s3" is not the file's secret
  Result<std::shared_ptr<NodeSession>> ra = Status(Errc::internal, "not run");
  std::thread t([&] {
    ra = NodeSession::join(*a.sys, "127.0.0.1", port, reg(2, 2, "127.0.0.1:7001", "from-file"), 3000ms);
  });
  auto rb = NodeSession::join(*b.sys, "127.0.0.1", port, reg(2, 1, "127.0.0.1:7002", "from-file"), 3000ms);
  t.join();
  ASSERT_TRUE(ra) << ra.status().to_string();
  ASSERT_TRUE(rb) << rb.status().to_string();
  EXPECT_EQ((*ra)->topology().num_nodes, 2u);
  EXPECT_EQ((*rb)->topology().total_peers, 3u);
  (*ra)->leave();
  (*rb)->leave();
  kill(pid, SIGTERM);
  EXPECT_NE(wait_or_kill(pid, 5000ms), -1);
  guard.pid = -1;
  std::remove(file.c_str());
}

// A bad value, on the command line or in the file, is an error naming it and exit status 2.
TEST(OrchestratorDaemon, BadValuesAreClearErrors) {
  const auto negative = write_config("negative", "port=0\nnodes=-1\n");
  const auto unquoted = write_config("unquoted", "port=0\nnodes=2\nsecret=1234\n");
  const auto typo = write_config("typo", "port=0\nnode=2\n");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"--port", "0", "--nodes", "abc"}, "bad argument --nodes=abc"},
      {{"--port=70000", "--nodes=2"}, "bad argument --port=70000"},
      {{"--port", "0", "--nodes", "0"}, "bad --nodes 0"},
      {{"--port", "0", "--nodes", "2", "--timeout-ms", "0"}, "bad --timeout-ms 0"},
      {{"--port", "0", "--nodes", "2", "--tls-cert", "x.pem"}, "TLS needs --tls-cert, --tls-key and --tls-ca"},
      {{"--port", "0", "--nodes", "2", "--frobnicate", "1"}, "unknown option --frobnicate"},
      {{"--port", "0", "--nodes", "2", "stray"}, "unexpected argument stray"},
      {{"--config-file", negative}, negative + ": bad value for nodes: -1"},
      {{"--config-file", unquoted}, unquoted + ": bad value for secret"},
      {{"--config-file", typo}, typo + ": unknown option node"},
      {{"--config-file", typo + ".absent"}, "cannot open the config file " + typo + ".absent"},
  };
  for (const auto& [args, message] : cases) {
    auto r = run_daemon(args);
    EXPECT_TRUE(r.exited_with(2)) << args.back() << ": status " << r.status << "\n" << r.output;
    EXPECT_NE(r.output.find("chorus-orchestrator: " + message), std::string::npos)
        << "expected \"" << message << "\" in:\n" << r.output;
  }
  for (const auto& f : {negative, unquoted, typo}) std::remove(f.c_str());
}

// A node process frozen (SIGSTOP), then another killed (SIGKILL), after the topology was handed
// out: the surviving nodes hear which node was lost, through BASP heartbeats for the frozen one.
TEST(OrchestratorDaemon, FrozenAndKilledNodeProcessesAreReported) {
  auto [orch, port, error] = start_orchestrator({"--port", "0", "--nodes", "3", "--secret", "s3", "--heartbeat-ms", "100"});
  ChildGuard orch_guard{orch};
  ASSERT_GT(orch, 0) << error;
  caf::actor_system_config cfg;
  configure_remoting(cfg, 100ms);
  {
    EventCount lost;  // before the system: its node actor calls it until it is gone
    caf::actor_system sys{cfg};
    // Two node processes (tests/orchestrator_node.cpp) and one node here, registering concurrently.
    std::vector<Child> kids(2);
    std::vector<ChildGuard> guards(2);
    for (int i = 0; i < 2; ++i) {
      kids[i] = spawn(sibling("chorus-test-orchestrator-node"), {std::to_string(port)}, Output::pipe);
      guards[i].pid = kids[i].pid;
      ASSERT_GT(kids[i].pid, 0);
    }
    auto me = NodeSession::join(sys, "127.0.0.1", port, reg(3, 1, "127.0.0.1:7001"), 3000ms,
                                [&lost](const NodeLostData&) { lost.raise(); });
    ASSERT_TRUE(me) << me.status().to_string();
    std::vector<Announcement> joined;
    for (auto& k : kids) {
      joined.push_back(read_word_after(k.out, "joined as node ", 5000ms));
      close(k.out);
    }
    ASSERT_FALSE(joined[0].word.empty()) << joined[0].output;
    ASSERT_FALSE(joined[1].word.empty()) << joined[1].output;
    auto frozen = static_cast<uint32_t>(std::stoi(joined[0].word));
    auto killed = static_cast<uint32_t>(std::stoi(joined[1].word));
    EXPECT_EQ((*me)->topology().total_peers, 5u);
    EXPECT_EQ((*me)->topology().nodes[frozen].num_peers, 2u);

    kill(kids[0].pid, SIGSTOP);
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(lost.wait_for(1, 3s));
    ASSERT_EQ((*me)->lost().size(), 1u) << "a frozen node went unnoticed";
    EXPECT_EQ((*me)->lost()[0].node_id, frozen);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);

    kill(kids[1].pid, SIGKILL);
    t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(lost.wait_for(2, 3s));
    ASSERT_EQ((*me)->lost().size(), 2u) << "a killed node went unnoticed";
    EXPECT_EQ((*me)->lost()[1].node_id, killed);
    (*me)->leave();
  }
  kill(orch, SIGTERM);
  EXPECT_NE(wait_or_kill(orch, 5000ms), -1);
  orch_guard.pid = -1;
}

TEST(OrchestratorDaemon, FrozenOrchestratorIsNoticedThroughHeartbeats) {
  auto [pid, port, error] = start_orchestrator({"--port", "0", "--nodes", "1", "--secret", "s3", "--heartbeat-ms", "100"});
  ChildGuard guard{pid};
  ASSERT_GT(pid, 0) << error;
  ASSERT_NE(port, 0);
  caf::actor_system_config cfg;
  configure_remoting(cfg, 100ms);
  {
    EventCount lost;  // before the system: its node actor calls it until it is gone
    caf::actor_system sys{cfg};
    auto r = NodeSession::join(sys, "127.0.0.1", port, reg(1, 1, "127.0.0.1:7001"), 3000ms,
                               [&lost](const NodeLostData&) { lost.raise(); });
    ASSERT_TRUE(r) << r.status().to_string();
    kill(pid, SIGSTOP);
    EXPECT_TRUE(lost.wait_for(1, 3s));
    EXPECT_FALSE((*r)->lost().empty()) << "a frozen orchestrator went unnoticed";
    kill(pid, SIGCONT);
    (*r)->leave();
  }
  kill(pid, SIGTERM);
  EXPECT_NE(wait_or_kill(pid, 5000ms), -1);
  guard.pid = -1;
}

} // namespace
} // namespace chorus
