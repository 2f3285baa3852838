// Through the public API: what a handle reports of its last op, and the runtime's multi-node group ids.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <chorus/config.hpp>
#include <chorus/runtime.hpp>
#include "runtime/runtime_impl.hpp"
#include "local_server_fixtures.hpp"
#include "strategies/planner.hpp"
#include "strategies/work_buffer.hpp"
#include "testkit/process.hpp"

namespace chorus {
namespace {

// ---------------------------------------------------------------- through the public API

// A host app reads what ran each op from its handle: the arena for the world's small ops, the
// tuning module's pick for host schedules (centralized below the threshold, direct at or above it
// in one process; a group's ops never use the arena), p2p for send/recv.
TEST(LastStrategy, PeersReadWhatRanTheirLastOp) {
  // A peer held up longer than the arena waits (a loaded machine) would send a small op the
  // ordinary way: here the arena waits up to a quarter of the timeout (read once per process; ctest
  // runs each case in a process of its own).
  setenv("CHORUS_ARENA_WAIT_MS", "60000", 1);
  Runtime rt;
  Config c;
  c.num_devices = 2;
  c.timeout = ms(10000);
  const std::size_t large = c.auto_threshold_bytes / 4;
  Topology two;
  two.peers = 2;
  std::vector<std::thread> threads;
  std::vector<std::vector<std::string>> seen(2);
  for (uint32_t p = 0; p < 2; ++p)
    threads.emplace_back([&, p] {
      auto peer = rt.register_peer(p, c);
      ASSERT_TRUE(peer.is_ok()) << peer.status().to_string();
      seen[p].push_back(peer->last_strategy());
      for (std::size_t count : {std::size_t{16}, large - 1, large}) {
        Tensor t = Tensor::zeros(DType::f32, {static_cast<int64_t>(count)});
        ASSERT_TRUE(peer->all_reduce(t, ReduceOp::sum).is_ok());
        seen[p].push_back(peer->last_strategy());
        // What ran is what the planner says runs the op.
        PlanQuery q;
        q.count = count;
        q.topology = two;
        q.arena_slot = arena_slot_bytes(2);
        const PlanDecision plan = plan_op(c, q);
        EXPECT_EQ(seen[p].back(), plan.first == RunStrategy::Path::arena ? "arena" : to_string(plan.path));
        EXPECT_EQ(plan.first == RunStrategy::Path::arena, count * sizeof(float) <= arena_slot_bytes(2));
      }
      Tensor x = Tensor::zeros(DType::f32, {8});
      ASSERT_TRUE((p == 0 ? peer->send(x, 1) : peer->recv(x, 0)).is_ok());
      seen[p].push_back(peer->last_strategy());
      // A group handle reports its own ops; the world handle keeps its last.
      auto solo = peer->new_group({p});
      ASSERT_TRUE(solo.is_ok()) << solo.status().to_string();
      EXPECT_EQ(peer->last_strategy(), "p2p");
      Tensor big = Tensor::zeros(DType::f32, {static_cast<int64_t>(large)});
      ASSERT_TRUE(solo->all_reduce(big, ReduceOp::sum).is_ok());
      seen[p].push_back(solo->last_strategy());
      EXPECT_EQ(peer->last_strategy(), "p2p");
      EXPECT_TRUE(solo->destroy().is_ok());
      EXPECT_TRUE(peer->finish().is_ok());
    });
  for (auto& t : threads) t.join();
  const std::vector<std::string> expected{"", "arena", "centralized", "direct", "p2p", "centralized"};
  EXPECT_EQ(seen[0], expected);
  EXPECT_EQ(seen[1], expected);
  EXPECT_EQ(Peer().last_strategy(), "");
}

// Multi-node group ids are unique in the job for every leader, also from global rank 4096 on
// (where `leader << 20` wrapped around onto leader 0's ids), and never reused: past the 32 bits a
// leader may use there is no id rather than a taken one.
TEST(GroupIds, UniqueForEveryLeaderAndNoneOnceALeadersIdsAreUsedUp) {
  constexpr uint32_t total = 10000;
  std::set<uint32_t> ids;
  std::size_t made = 0;
  for (uint32_t leader : {0u, 1u, 4095u, 4096u, 4097u, 8192u, 9999u})
    for (uint64_t k = 0; k < 200; ++k) {
      auto id = RuntimeImpl::group_id(leader, total, k);
      ASSERT_TRUE(id.has_value()) << leader << " " << k;
      EXPECT_NE(*id, 0u) << "0 is the world";
      ids.insert(*id);
      ++made;
    }
  EXPECT_EQ(ids.size(), made) << "two groups share an id";
  EXPECT_EQ(RuntimeImpl::group_id(4096, total, 0), std::optional<uint32_t>(4097));
  EXPECT_EQ(RuntimeImpl::group_id(4096, total, 3), std::optional<uint32_t>(4097 + 3 * total));
  // The last id that fits, then none; a leader outside the job has none.
  const uint32_t big = 1u << 31;
  EXPECT_EQ(RuntimeImpl::group_id(big - 1, big, 0), std::optional<uint32_t>(big));
  EXPECT_EQ(RuntimeImpl::group_id(big - 1, big, 1), std::nullopt);
  EXPECT_EQ(RuntimeImpl::group_id(0, big, 1), std::optional<uint32_t>(big + 1));
  EXPECT_EQ(RuntimeImpl::group_id(total, total, 0), std::nullopt);
  // A process hands out its leaders' ids in turn, each leader counting its own.
  Runtime rt;
  RuntimeImpl& impl = RuntimeAccess::impl(rt);
  EXPECT_EQ(impl.next_group_id(5000, total), std::optional<uint32_t>(5001));
  EXPECT_EQ(impl.next_group_id(5000, total), std::optional<uint32_t>(5001 + total));
  EXPECT_EQ(impl.next_group_id(4096, total), std::optional<uint32_t>(4097));
  EXPECT_EQ(impl.next_group_id(big - 1, big), std::optional<uint32_t>(big));
  EXPECT_EQ(impl.next_group_id(big - 1, big), std::nullopt);
}

} // namespace
} // namespace chorus
