// The arena of a job on one host (mesh/host_arena.hpp), its three steps without the frames that
// carry them (those run in every multi-process test on one host): node 0 makes it and describes
// it, another node maps it from that description, node 0 settles it. Both then map the same memory
// (what one posts the other reads), it is open once every node has it and closed for good where
// one could not map it, no descriptor of it is left for another process to find through /proc,
// and an offer of another collective, or of nothing, is declined.
#include <gtest/gtest.h>

#include <filesystem>
#include <future>

#include "mesh/host_arena.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;

TopologyData on_one_host(uint32_t me, uint64_t collective = 7) {
  TopologyData t;
  t.collective = collective;
  t.node_id = me;
  t.num_nodes = 2;
  t.total_peers = 2;
  t.token = 0x5eed;
  t.nodes = {{1, 0, "127.0.0.1:1", 0, 0}, {1, 1, "127.0.0.1:2", 0, 0}};  // one host
  return t;
}

bool segment_open_here() {
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (std::filesystem::read_symlink(e.path(), ec).string().find("chorus-arena") != std::string::npos) return true;
  }
  return false;
}

TEST(HostArena, OneArenaMappedByBothOpenOnceBothHaveIt) {
  Config cfg;  // host_transport automatic
  const std::size_t slot = host_arena_slot(cfg, on_one_host(0));
  ASSERT_GT(slot, 0u);
  auto segment = make_host_arena(on_one_host(0), slot);
  ASSERT_TRUE(segment->mapped());
  std::string why;
  auto theirs = take_host_arena(on_one_host(1), segment->describe(), slot, why);
  ASSERT_NE(theirs, nullptr) << why;
  auto ours = settle_host_arena(on_one_host(0), *segment, {});
  ASSERT_NE(ours, nullptr);
  EXPECT_FALSE(segment_open_here()) << "settled: nobody may open the segment any more";
  EXPECT_TRUE(ours->arena.usable());
  EXPECT_TRUE(theirs->arena.usable());
  EXPECT_EQ(theirs->arena.peers(), 2u);
  EXPECT_NE(ours->memory.get(), theirs->memory.get()) << "two mappings";
  ArenaCall c;
  c.kind = OpKind::barrier;
  c.fits = true;
  auto other = std::async(std::launch::async, [&] { return theirs->arena.meet(1, 0, c, nullptr, 0, Clock::now() + 5s, Patience{}); });
  EXPECT_EQ(ours->arena.meet(0, 0, c, nullptr, 0, Clock::now() + 5s, Patience{}), Arena::Verdict::go);
  EXPECT_EQ(other.get(), Arena::Verdict::go);
  theirs->arena.close();  // a lost node: nobody waits there any more
  EXPECT_FALSE(ours->arena.usable());
}

TEST(HostArena, ANodeThatCouldNotMapItClosesItForEveryone) {
  Config cfg;
  const std::size_t slot = host_arena_slot(cfg, on_one_host(0));
  auto segment = make_host_arena(on_one_host(0), slot);
  std::string why;
  auto theirs = take_host_arena(on_one_host(1), segment->describe(), slot, why);
  ASSERT_NE(theirs, nullptr) << why;
  EXPECT_EQ(settle_host_arena(on_one_host(0), *segment, {1}), nullptr);
  EXPECT_FALSE(theirs->arena.usable()) << "the node that has it mapped skips it";
  EXPECT_FALSE(segment_open_here());
}

TEST(HostArena, AnOfferOfAnotherCollectiveOrOfNothingIsDeclined) {
  Config cfg;
  const std::size_t slot = host_arena_slot(cfg, on_one_host(0));
  auto segment = make_host_arena(on_one_host(0), slot);
  std::string why;
  EXPECT_EQ(take_host_arena(on_one_host(1, 8), segment->describe(), slot, why), nullptr);
  EXPECT_FALSE(why.empty());
  why.clear();
  EXPECT_EQ(take_host_arena(on_one_host(1), SharedSegment().describe(), slot, why), nullptr);
  EXPECT_NE(why.find("no segment"), std::string::npos) << why;
  why.clear();  // a node whose own settings turn the arena off declines (and answers so)
  EXPECT_EQ(take_host_arena(on_one_host(1), segment->describe(), 0, why), nullptr);
  EXPECT_NE(why.find("turned off"), std::string::npos) << why;
}

TEST(HostArena, NoneAcrossHostsOrOnTheNetworkPath) {
  Config cfg;
  TopologyData two_hosts = on_one_host(0);
  two_hosts.nodes[1].host = 1;
  EXPECT_EQ(host_arena_slot(cfg, two_hosts), 0u);
  cfg.host_transport = HostTransport::network;
  EXPECT_EQ(host_arena_slot(cfg, on_one_host(0)), 0u);
}

} // namespace
} // namespace chorus
