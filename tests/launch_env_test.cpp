// Processes launched the ways users launch them, each given the environment its launcher gives
// (Config::from_env): Open MPI's on one host (the ranks meet through rank 0's rendezvous file),
// torchrun's (rank 0 hosts the orchestrator at MASTER_ADDR:MASTER_PORT, started last here), a
// refused rank ending its partners' join at once, and Debian's real mpirun. The program is
// examples/multi_node.cpp (chorus-node-example), which checks its own results; launcher ranks
// are the ranks the program reports (no longer arrival order).
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "testkit/process.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;
namespace tk = chorus::testkit;

// Whether a listener could take 127.0.0.1:port now.
bool bindable(uint16_t port) {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(s);
  return ok;
}

// A port P that nobody holds now, nor P + 1 (where rank 0 hosts the orchestrator under torchrun's
// variables). Drawn below the kernel's ephemeral range (32768 and up here), where no outgoing
// connection of another suite takes a port between the draw and rank 0's listen: the kernel's
// own pick of a free port lies in that range, and a flood of loopback connections (the fuzz
// targets, a suite's node processes) once took P + 1 four times running.
uint16_t free_port() {
  static uint32_t seed = static_cast<uint32_t>(::getpid()) * 2654435761u;
  for (int tries = 0; tries < 1000; ++tries) {
    seed = seed * 1664525u + 1013904223u;
    const auto port = static_cast<uint16_t>(20000 + (seed >> 8) % 12000);
    if (bindable(port) && bindable(static_cast<uint16_t>(port + 1))) return port;
  }
  return 0;
}

struct Ran {
  int status = -1;
  std::string output;
};

// Launched processes, each with its own extra environment; their stdout and stderr together.
class Launched : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/chorus-launch-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    tmp_ = dir;
  }
  void TearDown() override { std::filesystem::remove_all(tmp_); }

  void start(std::vector<std::string> env) {
    env.push_back("TMPDIR=" + tmp_);
    env.push_back("XDG_RUNTIME_DIR=");  // the rendezvous file in TMPDIR, where the test looks
    kids_.push_back(tk::spawn(tk::sibling("chorus-node-example"), {}, tk::Output::pipe_with_stderr, env));
    ASSERT_GT(kids_.back().pid, 0);
    guard(kids_.back().pid);
  }
  void guard(pid_t pid) {
    guards_.push_back(std::make_unique<tk::ChildGuard>());  // made in place: a moved guard would kill at once
    guards_.back()->pid = pid;
  }
  // Waits for every process (up to `limit` in all, then kills what is left).
  std::vector<Ran> finish(std::chrono::milliseconds limit = 60s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    std::vector<Ran> out;
    for (std::size_t i = 0; i < kids_.size(); ++i) {
      Ran r;
      r.output = tk::read_all(kids_[i].out, deadline);
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      r.status = tk::wait_or_kill(kids_[i].pid, std::max(left, 1ms));
      guards_[i]->pid = -1;  // reaped
      out.push_back(std::move(r));
    }
    return out;
  }
  static std::string dump(const std::vector<Ran>& rs) {
    std::string s;
    for (std::size_t i = 0; i < rs.size(); ++i)
      s += "--- process " + std::to_string(i) + " (" + tk::describe_status(rs[i].status) + ")\n" + rs[i].output;
    return s;
  }
  static bool ok(const Ran& r) { return WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0; }

  std::string tmp_;
  std::vector<tk::Child> kids_;
  std::vector<std::unique_ptr<tk::ChildGuard>> guards_;
};

// Open MPI's variables on one host, 4 processes x 2 peers: no address anywhere, the ranks meet
// through the file rank 0 writes; process k's peers are ranks 2k and 2k+1.
TEST_F(Launched, OpenMpiOnOneHostNeedsNoAddress) {
  const std::string job = "ompi-test-" + std::to_string(::getpid());
  for (int k = 3; k >= 0; --k)  // rank 0, which hosts the orchestrator, last
    start({"OMPI_COMM_WORLD_RANK=" + std::to_string(k), "OMPI_COMM_WORLD_SIZE=4",
           "OMPI_COMM_WORLD_LOCAL_RANK=" + std::to_string(k), "OMPI_COMM_WORLD_LOCAL_SIZE=4",
           "OMPI_MCA_ess_base_jobid=" + std::to_string(::getpid()), "CHORUS_PEERS=2", "CHORUS_JOIN_TIMEOUT_MS=30000"});
  auto rs = finish();
  for (int i = 0; i < 4; ++i) {
    const int k = 3 - i;
    ASSERT_TRUE(ok(rs[i])) << dump(rs);
    for (int r : {2 * k, 2 * k + 1})
      EXPECT_NE(rs[i].output.find("rank " + std::to_string(r) + " of 8: all_reduce ok, broadcast ok"), std::string::npos)
          << dump(rs);
  }
  // Rank 0 took its rendezvous file away when it ended.
  EXPECT_FALSE(std::filesystem::exists(tmp_ + "/chorus-" + std::to_string(::getuid()) + "/ompi-" +
                                       std::to_string(::getpid()) + ".rendezvous"));
}

// torchrun's variables: rank 0 hosts the orchestrator at MASTER_ADDR:MASTER_PORT; the others,
// started first, try again until it listens.
TEST_F(Launched, TorchrunsRankZeroHostsTheOrchestratorAndLateStartsAreWaitedFor) {
  const std::string port = std::to_string(free_port());
  for (int k = 2; k >= 0; --k)
    start({"RANK=" + std::to_string(k), "WORLD_SIZE=3", "LOCAL_RANK=" + std::to_string(k), "LOCAL_WORLD_SIZE=3",
           "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port, "CHORUS_JOIN_TIMEOUT_MS=30000"});
  auto rs = finish();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(ok(rs[i])) << dump(rs);
    EXPECT_NE(rs[i].output.find("rank " + std::to_string(2 - i) + " of 3: all_reduce ok"), std::string::npos) << dump(rs);
  }
}

// A rank the orchestrator refuses (here it counts another world size) ends the join of the rank
// waiting for it at once, named with the reason, long before the join timeout.
TEST_F(Launched, ARefusedRankEndsItsPartnersJoinAtOnceNamingIt) {
  std::string port;
  tk::Announcement said;
  for (int attempt = 0;; ++attempt) {
    port = std::to_string(free_port());
    start({"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port, "CHORUS_JOIN_TIMEOUT_MS=60000",
           "CHORUS_DEBUG=info", "CHORUS_DEBUG_SUBSYS=orch"});
    // Rank 0 is in (its own orchestrator says so) before the other comes.
    said = tk::read_word_after(kids_[0].out, "registered (1 of ", 30s);
    // The free port may be taken by another suite before rank 0 listens (ctest -j): another one.
    if (!said.word.empty() || said.output.find("Address already in use") == std::string::npos || attempt == 3) break;
    (void)finish();
    kids_.clear();
    guards_.clear();
  }
  ASSERT_EQ(said.word, "2)") << said.output;
  const auto refused_from = std::chrono::steady_clock::now();
  start({"RANK=1", "WORLD_SIZE=3", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port, "CHORUS_JOIN_TIMEOUT_MS=60000"});
  auto rs = finish();
  EXPECT_LT(std::chrono::steady_clock::now() - refused_from, 20s);  // not the 60 s join timeout
  EXPECT_FALSE(ok(rs[0])) << dump(rs);
  EXPECT_FALSE(ok(rs[1])) << dump(rs);
  EXPECT_NE(rs[0].output.find("was refused: num_nodes (3 vs 2"), std::string::npos) << said.output << dump(rs);
  // The refused rank hears its reason, unless rank 0, failing at once itself, took its
  // orchestrator down before the answer was on the wire: then it hears that it is gone.
  EXPECT_TRUE(rs[1].output.find("num_nodes (3 vs 2") != std::string::npos ||
              rs[1].output.find("orchestrator lost") != std::string::npos)
      << dump(rs);
}

// chorus-run, 4 processes x 2 peers: process k's peers are ranks 2k and 2k+1 (its output tagged).
TEST_F(Launched, ChorusRunFourProcessesOfTwoPeers) {
  kids_.push_back(tk::spawn(tk::sibling("chorus-run"),
                            {"-n", "4", "--peers", "2", "--tag-output", tk::sibling("chorus-node-example")},
                            tk::Output::pipe_with_stderr));
  ASSERT_GT(kids_.back().pid, 0);
  guard(kids_.back().pid);
  auto rs = finish();
  ASSERT_TRUE(ok(rs[0])) << dump(rs);
  for (int k = 0; k < 4; ++k)
    for (int r : {2 * k, 2 * k + 1})
      EXPECT_NE(rs[0].output.find("[" + std::to_string(k) + "] rank " + std::to_string(r) +
                                  " of 8: all_reduce ok, broadcast ok"),
                std::string::npos)
          << dump(rs);
}

// A rank that fails before it joins ends the job at once with its status: the others, waiting in
// their join, are ended by chorus-run (not by their 60 s join timeout).
TEST_F(Launched, ChorusRunEndsTheJobWithTheFirstFailuresStatus) {
  const auto started = std::chrono::steady_clock::now();
  const std::string program = "if [ \"$CHORUS_RANK\" = 2 ]; then exit 3; fi; exec " + tk::sibling("chorus-node-example");
  kids_.push_back(tk::spawn(tk::sibling("chorus-run"),
                            {"-n", "4", "--join-timeout-ms", "60000", "/bin/sh", "-c", program},
                            tk::Output::pipe_with_stderr));
  ASSERT_GT(kids_.back().pid, 0);
  guard(kids_.back().pid);
  auto rs = finish();
  EXPECT_LT(std::chrono::steady_clock::now() - started, 30s);
  ASSERT_TRUE(WIFEXITED(rs[0].status)) << dump(rs);
  EXPECT_EQ(WEXITSTATUS(rs[0].status), 3) << dump(rs);
  EXPECT_NE(rs[0].output.find("rank 2 (host localhost) exited with status 3"), std::string::npos) << dump(rs);
}

// Debian's mpirun, for real: the same program, nothing set by hand.
TEST_F(Launched, RealMpirun) {
  if (::access("/usr/bin/mpirun", X_OK) != 0) GTEST_SKIP() << "mpirun is not installed (apt-get install openmpi-bin)";
  std::vector<std::string> args{"--oversubscribe", "-n", "4", "-x", "TMPDIR=" + tmp_, tk::sibling("chorus-node-example")};
  if (::getuid() == 0) args.insert(args.begin(), "--allow-run-as-root");
  kids_.push_back(tk::spawn("/usr/bin/mpirun", args, tk::Output::pipe_with_stderr));
  ASSERT_GT(kids_.back().pid, 0);
  guard(kids_.back().pid);
  auto rs = finish();
  ASSERT_TRUE(ok(rs[0])) << dump(rs);
  for (int r = 0; r < 4; ++r)
    EXPECT_NE(rs[0].output.find("rank " + std::to_string(r) + " of 4: all_reduce ok, broadcast ok"), std::string::npos)
        << dump(rs);
}

} // namespace
} // namespace chorus
