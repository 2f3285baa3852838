// Rank 0 hosting the orchestrator, in one process (so that TSan sees it): three Runtimes, one per
// node, meet through rank 0's rendezvous file (Config::host_orchestrator, rendezvous_file; the
// ranks a launcher would give); the file and the port go with rank 0's Runtime; a port that cannot
// be had fails rank 0's join naming the address. The same across processes: launch_env_test.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include <chorus/chorus.hpp>
#include "status_matchers.hpp"
#include "transport/socket.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;

class HostedOrchestrator : public ::testing::Test {
 protected:
  void SetUp() override {
    char d[] = "/tmp/chorus-hosted-XXXXXX";
    ASSERT_NE(::mkdtemp(d), nullptr);
    dir_ = d;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  Config node(int32_t rank, uint32_t nodes) const {
    Config c;
    c.num_nodes = nodes;
    c.rank = rank;
    c.node_address = "127.0.0.1";
    c.rendezvous_file = dir_ + "/mine/job.rendezvous";
    c.host_orchestrator = rank == 0;
    c.timeout = 20s;
    return c;
  }
  std::string dir_;
};

TEST_F(HostedOrchestrator, ThreeNodesMeetThroughRankZerosFileAsTheirLauncherNumberedThem) {
  std::vector<std::unique_ptr<Runtime>> rts;
  for (int i = 0; i < 3; ++i) rts.push_back(std::make_unique<Runtime>());
  std::vector<Status> got(3, Status(Errc::internal, "not run"));
  std::vector<uint32_t> rank(3, 99);
  std::vector<float> sum(3, 0);
  std::vector<std::thread> threads;
  for (int r : {2, 1, 0})  // rank 0, which hosts, last: the others wait for its file
    threads.emplace_back([&, r] {
      auto peer = rts[r]->register_peer(0, node(r, 3));
      if (!peer) {
        got[r] = peer.status();
        return;
      }
      rank[r] = peer->rank();
      auto t = Tensor::from(std::vector<float>(16, static_cast<float>(r + 1)));
      got[r] = peer->all_reduce(t, ReduceOp::sum);
      sum[r] = t.data_as<float>()[15];
      (void)peer->finish();
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(got[r].is_ok()) << "rank " << r << ": " << got[r].to_string();
    EXPECT_EQ(rank[r], static_cast<uint32_t>(r));  // the launcher's rank, not arrival order
    EXPECT_EQ(sum[r], 6.0f);
  }
  const std::string file = dir_ + "/mine/job.rendezvous";
  EXPECT_TRUE(std::filesystem::exists(file));
  rts[0].reset();  // rank 0's Runtime takes its file with it
  EXPECT_FALSE(std::filesystem::exists(file));
}

// A port that cannot be had (taken here) fails rank 0's join at once, naming the address; the
// Runtime keeps nothing of it.
TEST_F(HostedOrchestrator, APortThatCannotBeHadFailsTheJoinNamingIt) {
  int fd = -1;
  uint16_t port = 0;
  ASSERT_TRUE(tcp_listen("127.0.0.1", 0, fd, port).is_ok());
  Config c = node(0, 2);
  c.rendezvous_file.clear();
  c.orchestrator_address = "127.0.0.1:" + std::to_string(port);
  Runtime rt;
  auto peer = rt.register_peer(0, c);
  ::close(fd);
  EXPECT_TRUE(has(peer.status(), Errc::unreachable, {"cannot host the orchestrator at 127.0.0.1:" + std::to_string(port)}))
      << peer.status().to_string();
}

} // namespace
} // namespace chorus
