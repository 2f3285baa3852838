// Error paths of registration and configuration, handles that are not registered, and finish.
// Every error has its own Errc and a message that names the peers and values involved, and the
// next op (a correct all_reduce, checked for its values) works normally afterwards.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <chorus/chorus.hpp>
#include "error_checks.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;
using namespace testing;

// ---------------------------------------------------------------- registration and configuration

TEST(Errors, InvalidConfigNamesTheField) {
  Runtime rt;
  auto reg = [&](const Config& c) { return rt.register_peer(0, c).status(); };
  Config c = config_for(0);
  EXPECT_TRUE(has(reg(c), Errc::invalid_config, {"num_devices is 0"}));
  c = config_for(2);
  c.auto_tree_arity = 1;
  EXPECT_TRUE(has(reg(c), Errc::invalid_config, {"auto_tree_arity 1", "below 2"}));
  c = config_for(2);
  c.local[static_cast<std::size_t>(OpKind::reduce)] = StrategyChoice{false, {Algorithm::tree, 0}};
  EXPECT_TRUE(has(reg(c), Errc::invalid_config, {"local strategy for reduce", "tree arity 0"}));
  c = config_for(2);
  c.global[static_cast<std::size_t>(OpKind::barrier)] = StrategyChoice{false, {Algorithm::tree, 1}};
  EXPECT_TRUE(has(reg(c), Errc::invalid_config, {"global strategy for barrier", "tree arity 1"}));
  c = config_for(2, "auto", 0);
  EXPECT_TRUE(has(reg(c), Errc::invalid_config, {"timeout", "0 ms"}));
  c = config_for(2, "auto", -100);
  EXPECT_TRUE(has(reg(c), Errc::invalid_config, {"timeout", "-100 ms"}));
  c = config_for(2);
  c.num_nodes = 4;
  EXPECT_TRUE(has(reg(c), Errc::invalid_config, {"num_nodes, orchestrator_address and node_address"}));
  c = config_for(2);
  c.orchestrator_address = "10.0.0.1:7000";
  c.node_address = "10.0.0.2:7100";
  EXPECT_TRUE(has(reg(c), Errc::invalid_config, {"multi-node"}));
  c = config_for(2);
  c.node_address = "10.0.0.2:7100";
  EXPECT_TRUE(has(reg(c), Errc::invalid_config, {"multi-node"}));
  // Nothing was fixed by the rejected registers: a valid collective works on the same runtime.
  run_peers(rt, config_for(2), correct_all_reduce);
}

TEST(Errors, RegisterTwice) {
  Runtime rt;
  const Config c = config_for(2);
  auto first = rt.register_peer(1, c);
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  auto again = rt.register_peer(1, c);
  EXPECT_TRUE(has(again.status(), Errc::register_twice, {"peer 1", "already registered"}));
  // The first registration still stands.
  auto zero = rt.register_peer(0, c);
  ASSERT_TRUE(zero.is_ok());
  std::thread t([&] { correct_all_reduce(*first); });
  correct_all_reduce(*zero);
  t.join();
}

TEST(Errors, PeerIdOutOfRange) {
  Runtime rt;
  EXPECT_TRUE(has(rt.register_peer(3, config_for(3)).status(), Errc::invalid_argument, {"peer id 3", "[0, 3)"}));
  EXPECT_TRUE(has(rt.register_peer(100, config_for(3)).status(), Errc::invalid_argument, {"peer id 100"}));
  run_peers(rt, config_for(3), correct_all_reduce);
}

TEST(Errors, ConfigMismatchNumDevices) {
  Runtime rt;
  auto p0 = rt.register_peer(0, config_for(3));
  ASSERT_TRUE(p0.is_ok());
  EXPECT_TRUE(has(rt.register_peer(1, config_for(2)).status(), Errc::config_mismatch,
                  {"peer 1", "differs from the first peer's", "num_devices (3 vs 2)"}));
}

TEST(Errors, ConfigMismatchStrategyAndTimeout) {
  Runtime rt;
  const Config c = config_for(2, "ring");
  auto p0 = rt.register_peer(0, c);
  ASSERT_TRUE(p0.is_ok());
  EXPECT_TRUE(has(rt.register_peer(1, config_for(2, "tree:3")).status(), Errc::config_mismatch,
                  {"peer 1", "local strategy for all_reduce (ring vs tree:3)"}));
  Config one_kind = c;
  one_kind.local[static_cast<std::size_t>(OpKind::all_to_all)] = *parse_strategy("centralized");
  EXPECT_TRUE(has(rt.register_peer(1, one_kind).status(), Errc::config_mismatch,
                  {"local strategy for all_to_all (ring vs centralized)"}));
  EXPECT_TRUE(has(rt.register_peer(1, config_for(2, "ring", 500)).status(), Errc::config_mismatch,
                  {"timeout_ms (10000 vs 500)"}));
  Config arity = c;
  arity.auto_tree_arity = 3;
  EXPECT_TRUE(has(rt.register_peer(1, arity).status(), Errc::config_mismatch, {"auto_tree_arity (2 vs 3)"}));
  // The right config still joins, and the collective works.
  auto p1 = rt.register_peer(1, c);
  ASSERT_TRUE(p1.is_ok()) << p1.status().to_string();
  std::thread t([&] { correct_all_reduce(*p1); });
  correct_all_reduce(*p0);
  t.join();
}

// ---------------------------------------------------------------- handles that are not registered

TEST(Errors, DefaultConstructedPeer) {
  Peer p;
  EXPECT_EQ(p.size(), 0u);
  Tensor t = f32({1, 2, 3});
  Tensor out = f32_zeros(3);
  Tensor big = f32_zeros(9);
  const std::vector<Status> all = {
      p.all_reduce(t, ReduceOp::sum),
      p.all_reduce(t, out, ReduceOp::max),
      p.reduce(t, ReduceOp::sum, 0),
      p.broadcast(t, 0),
      p.broadcast(std::optional<Tensor>(t)).status(),
      p.broadcast(std::nullopt).status(),
      p.all_gather(t, big),
      p.reduce_scatter(big, t, ReduceOp::sum),
      p.all_to_all(t, out),
      p.gather(t, big, 0),
      p.scatter(big, t, 0),
      p.scatter(std::optional<Tensor>(big)).status(),
      p.barrier(),
      p.send(t, 1),
      p.recv(t, 1),
      p.finish(),
  };
  for (std::size_t i = 0; i < all.size(); ++i)
    EXPECT_TRUE(has(all[i], Errc::not_registered, {"never registered"})) << "call " << i;
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3})) << "a failed call must not touch the buffer";
}

TEST(Errors, HandleForgottenByAResetIsNotRegistered) {
  Runtime rt;
  auto p0 = rt.register_peer(0, config_for(2));
  ASSERT_TRUE(p0.is_ok());
  ASSERT_TRUE(rt.reset().is_ok());
  Tensor t = f32({1});
  EXPECT_TRUE(has(p0->all_reduce(t, ReduceOp::sum), Errc::not_registered, {"peer 0", "before registering"}));
  EXPECT_TRUE(has(p0->send(t, 1), Errc::not_registered, {"peer 0"}));
  EXPECT_TRUE(has(p0->finish(), Errc::not_registered, {"peer 0"}));
}

// ---------------------------------------------------------------- finish

TEST(Errors, FinishTwice) {
  Runtime rt;
  const Config c = config_for(2);
  auto p0 = rt.register_peer(0, c);
  auto p1 = rt.register_peer(1, c);
  ASSERT_TRUE(p0.is_ok() && p1.is_ok());
  ASSERT_TRUE(p0->finish().is_ok());
  EXPECT_TRUE(has(p0->finish(), Errc::unregister_twice, {"peer 0", "finished twice"}));
  ASSERT_TRUE(p1->finish().is_ok());
}

TEST(Errors, OpsAfterFinish) {
  Runtime rt;
  const Config c = config_for(3, "auto", 300);
  auto p0 = rt.register_peer(0, c);
  auto p1 = rt.register_peer(1, c);
  ASSERT_TRUE(p0.is_ok() && p1.is_ok());
  ASSERT_TRUE(p0->finish().is_ok());
  Tensor t = f32({1, 2});
  Tensor out = f32_zeros(6);
  EXPECT_TRUE(has(p0->all_reduce(t, ReduceOp::sum), Errc::finished, {"peer 0", "already finished"}));
  EXPECT_TRUE(has(p0->all_gather(t, out), Errc::finished, {"peer 0"}));
  EXPECT_TRUE(has(p0->barrier(), Errc::finished, {"peer 0"}));
  EXPECT_TRUE(has(p0->broadcast(std::nullopt).status(), Errc::finished, {"peer 0"}));
  EXPECT_TRUE(has(p0->send(t, 1), Errc::finished, {"peer 0"}));
  EXPECT_TRUE(has(p0->recv(t, 1), Errc::finished, {"peer 0"}));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2}));
  // A finished peer may not register again until every peer has finished.
  EXPECT_TRUE(has(rt.register_peer(0, c).status(), Errc::finished, {"peer 0", "has finished"}));
}

// LIBRARY BUG (actors/local_server/server_core.cpp on_finish/check_caller): when the LAST registered peer
// finishes, the server forgets the whole collective (clear()), so that peer's second finish gets
// not_registered "peer 0 called before registering" instead of unregister_twice, and its ops get
// not_registered instead of the Errc::finished that peer.hpp promises ("further ops fail with
// Errc::finished"). With num_devices 1 this happens on every finish.
TEST(Errors, FinishTwiceByTheLastPeer) {
  Runtime rt;
  auto p = rt.register_peer(0, config_for(1));
  ASSERT_TRUE(p.is_ok());
  ASSERT_TRUE(p->finish().is_ok());
  EXPECT_TRUE(has(p->finish(), Errc::unregister_twice, {"peer 0"}));
}

TEST(Errors, OpAfterTheLastPeerFinished) {
  Runtime rt;
  auto p = rt.register_peer(0, config_for(1));
  ASSERT_TRUE(p.is_ok());
  ASSERT_TRUE(p->finish().is_ok());
  Tensor t = f32({1});
  EXPECT_TRUE(has(p->all_reduce(t, ReduceOp::sum), Errc::finished, {"peer 0"}));
}

TEST(Errors, EveryoneFinishedThenANewCollectiveRegisters) {
  Runtime rt;
  run_peers(rt, config_for(2), correct_all_reduce);  // finishes every peer
  run_peers(rt, config_for(3, "ring"), correct_all_reduce);
}

} // namespace
} // namespace chorus
