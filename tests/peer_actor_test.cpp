// Peer actors (chorus/peer_actor.hpp): every message kind with its values, registration that does
// not block the spawner (and its failure, answered to every request), group actors, gradient sync,
// and an actor's exit finishing its peer. Events are ordered by replies and monitors only.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>

#include <chorus/chorus.hpp>
#include <chorus/caf.hpp>
#include "actors/local_server/local_server.hpp"
#include "runtime/runtime_impl.hpp"
#include "peer_harness.hpp"
#include "status_matchers.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;
using harness::config_for;

constexpr auto kWait = 20s;  // a request's own timeout: only reached when something hangs

std::vector<int32_t> ints(const Tensor& t) { return t.to_vector<int32_t>(); }

// Asks every actor of `to` for make(rank) at once (the ops need all of them), then collects the
// replies in rank order.
template <class Done, class Make>
std::vector<Done> ask_all(caf::scoped_actor& self, const std::vector<peer_actor>& to, Make make) {
  std::vector<decltype(self->request(to[0], kWait, make(0u)))> pending;
  for (uint32_t r = 0; r < to.size(); ++r) pending.push_back(self->request(to[r], kWait, make(r)));
  std::vector<Done> out(to.size());
  for (uint32_t r = 0; r < to.size(); ++r)
    pending[r].receive([&](Done& d) { out[r] = std::move(d); },
                       [&](caf::error& e) { ADD_FAILURE() << "rank " << r << ": " << to_string(e); });
  return out;
}

template <class Done, class Call>
Done ask(caf::scoped_actor& self, const peer_actor& to, Call call) {
  return ask_all<Done>(self, {to}, [&](uint32_t) { return call; })[0];
}

void expect_all_ok(const auto& replies) {
  for (std::size_t r = 0; r < replies.size(); ++r) EXPECT_TRUE(replies[r].status().is_ok()) << "rank " << r << ": " << replies[r].status().to_string();
}

// A runtime with n peer actors and a scoped actor to talk to them.
struct PeerActors : ::testing::Test {
  Runtime rt;
  caf::scoped_actor self{actor_system_of(rt)};
  std::vector<peer_actor> peers;
  void spawn(uint32_t n, const Config& cfg) {
    for (uint32_t id = 0; id < n; ++id) peers.push_back(spawn_peer_actor(rt, id, cfg));
  }
  void SetUp() override { spawn(3, config_for(3)); }
};

TEST_F(PeerActors, ReadyNamesEachPeer) {
  auto ready = ask_all<ReadyDone>(self, peers, [](uint32_t) { return ReadyCall{}; });
  expect_all_ok(ready);
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(ready[r].id, r);
    EXPECT_EQ(ready[r].rank, r);
    EXPECT_EQ(ready[r].size, 3u);
    EXPECT_EQ(ready[r].group, 0u);
    EXPECT_EQ(ready[r].node, 0u);
    EXPECT_EQ(ready[r].members, (std::vector<PeerId>{0, 1, 2}));
  }
}

TEST_F(PeerActors, EveryCollectiveAndSendRecv) {
  auto op = [&](std::function<OpCall(uint32_t)> make) {
    auto done = ask_all<OpDone>(self, peers, make);
    expect_all_ok(done);
    return done;
  };
  auto v = [](std::vector<int32_t> x) { return Tensor::from(x); };

  auto sum = op([&](uint32_t r) { Tensor t = v({int32_t(r + 1), int32_t(r + 1)}); return OpCall::all_reduce(t, t, ReduceOp::sum); });
  for (auto& d : sum) EXPECT_EQ(ints(d.output), (std::vector<int32_t>{6, 6}));

  std::vector<Tensor> outs;
  for (int r = 0; r < 3; ++r) outs.push_back(v({-1, -1}));
  op([&](uint32_t r) { return OpCall::reduce(v({int32_t(10 * r), int32_t(10 * r + 1)}), outs[r], ReduceOp::max, 1); });
  EXPECT_EQ(ints(outs[1]), (std::vector<int32_t>{20, 21}));
  EXPECT_EQ(ints(outs[0]), (std::vector<int32_t>{-1, -1}));  // off the root: untouched
  EXPECT_EQ(ints(outs[2]), (std::vector<int32_t>{-1, -1}));

  auto bc = op([&](uint32_t r) { return OpCall::broadcast(r == 2 ? v({7, 8, 9}) : v({0, 0, 0}), 2); });
  for (auto& d : bc) EXPECT_EQ(ints(d.output), (std::vector<int32_t>{7, 8, 9}));

  auto ag = op([&](uint32_t r) { return OpCall::all_gather(v({int32_t(r), int32_t(r)}), v({0, 0, 0, 0, 0, 0})); });
  for (auto& d : ag) EXPECT_EQ(ints(d.output), (std::vector<int32_t>{0, 0, 1, 1, 2, 2}));

  // Block j of peer p's input is p + 10j; peer r gets the sum over p of block r.
  auto rs = op([&](uint32_t r) { return OpCall::reduce_scatter(v({int32_t(r), int32_t(r + 10), int32_t(r + 20)}), v({0}), ReduceOp::sum); });
  for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(ints(rs[r].output), (std::vector<int32_t>{int32_t(3 + 30 * r)}));

  auto a2a = op([&](uint32_t r) { return OpCall::all_to_all(v({int32_t(10 * r), int32_t(10 * r + 1), int32_t(10 * r + 2)}), v({0, 0, 0})); });
  for (uint32_t r = 0; r < 3; ++r)
    EXPECT_EQ(ints(a2a[r].output), (std::vector<int32_t>{int32_t(r), int32_t(10 + r), int32_t(20 + r)}));

  auto ga = op([&](uint32_t r) { return OpCall::gather(v({int32_t(100 + r)}), v({0, 0, 0}), 0); });
  EXPECT_EQ(ints(ga[0].output), (std::vector<int32_t>{100, 101, 102}));

  auto sc = op([&](uint32_t r) { return OpCall::scatter(r == 1 ? v({5, 6, 7}) : Tensor(), v({0}), 1); });
  for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(ints(sc[r].output), (std::vector<int32_t>{int32_t(5 + r)}));

  op([&](uint32_t) { return OpCall::barrier(); });

  // Point to point: 0 sends to 2 (tag 9); 1 takes no part.
  Tensor got = v({0, 0});
  auto sent = self->request(peers[0], kWait, OpCall::send(v({42, 43}), 2, 9));
  auto recvd = self->request(peers[2], kWait, OpCall::recv(got, 0, 9));
  sent.receive([](OpDone& d) { EXPECT_TRUE(d.status().is_ok()) << d.status().to_string(); },
               [](caf::error& e) { ADD_FAILURE() << to_string(e); });
  recvd.receive([&](OpDone& d) {
                  EXPECT_TRUE(d.status().is_ok()) << d.status().to_string();
                  EXPECT_EQ(d.output.data(), got.data());  // the reply names the caller's buffer
                },
                [](caf::error& e) { ADD_FAILURE() << to_string(e); });
  EXPECT_EQ(ints(got), (std::vector<int32_t>{42, 43}));
  // From any source: 1 sends to 0 (tag 4), and 0's reply names rank 1.
  Tensor any = v({0});
  auto sent1 = self->request(peers[1], kWait, OpCall::send(v({7}), 0, 4));
  auto took = self->request(peers[0], kWait, OpCall::recv_any(any, 4));
  sent1.receive([](OpDone& d) { EXPECT_TRUE(d.status().is_ok()) << d.status().to_string(); },
                [](caf::error& e) { ADD_FAILURE() << to_string(e); });
  took.receive([](OpDone& d) {
                 EXPECT_TRUE(d.status().is_ok()) << d.status().to_string();
                 EXPECT_EQ(d.source, 1u);
               },
               [](caf::error& e) { ADD_FAILURE() << to_string(e); });
  EXPECT_EQ(ints(any), (std::vector<int32_t>{7}));

  // An op's error reaches every peer of it in its reply.
  auto bad = ask_all<OpDone>(self, peers, [&](uint32_t r) { return OpCall::all_reduce(v(std::vector<int32_t>(r + 1, 1)), v(std::vector<int32_t>(r + 1, 0)), ReduceOp::sum); });
  for (auto& d : bad) EXPECT_EQ(d.status().code(), Errc::shape_mismatch) << d.status().to_string();
}

TEST_F(PeerActors, BroadcastAndScatterByData) {
  auto bc = ask_all<ByDataDone>(self, peers, [](uint32_t r) {
    return ByDataCall::broadcast(r == 1 ? std::optional<Tensor>(Tensor::from(std::vector<float>{1.5f, 2.5f})) : std::nullopt);
  });
  expect_all_ok(bc);
  for (auto& d : bc) EXPECT_EQ(d.result.to_vector<float>(), (std::vector<float>{1.5f, 2.5f}));

  auto sc = ask_all<ByDataDone>(self, peers, [](uint32_t r) {
    return ByDataCall::scatter(r == 0 ? std::optional<Tensor>(Tensor::from(std::vector<int64_t>{0, 1, 2, 3, 4, 5}, {3, 2}))
                                      : std::nullopt);
  });
  expect_all_ok(sc);
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(sc[r].result.shape(), (Shape{2}));
    EXPECT_EQ(sc[r].result.to_vector<int64_t>(), (std::vector<int64_t>{2 * r, 2 * r + 1}));
  }

  auto none = ask_all<ByDataDone>(self, peers, [](uint32_t) { return ByDataCall::broadcast(std::nullopt); });
  for (auto& d : none) EXPECT_TRUE(has(d.status(), Errc::no_data, {"no peer supplied the data"}));
}

TEST_F(PeerActors, ObjectCollectives) {
  auto all = ask_all<ObjectDone>(self, peers, [](uint32_t r) { return ObjectCall::all_gather(std::string(r, 'x') + "!"); });
  expect_all_ok(all);
  for (auto& d : all) EXPECT_EQ(d.objects, (std::vector<std::string>{"!", "x!", "xx!"}));

  auto bc = ask_all<ObjectDone>(self, peers, [](uint32_t r) {
    return ObjectCall::broadcast(r == 2 ? std::optional<std::string>("hello") : std::nullopt);
  });
  expect_all_ok(bc);
  for (auto& d : bc) EXPECT_EQ(d.objects, (std::vector<std::string>{"hello"}));

  auto mine = [](uint32_t r) { return Tensor::from(std::vector<int32_t>(r + 1, int32_t(r))); };
  auto agv = ask_all<TensorsDone>(self, peers, [&](uint32_t r) { return TensorsCall::all_gather_v(mine(r)); });
  expect_all_ok(agv);
  for (auto& d : agv) {
    ASSERT_EQ(d.tensors.size(), 3u);
    for (uint32_t p = 0; p < 3; ++p) EXPECT_EQ(ints(d.tensors[p]), ints(mine(p)));
  }

  auto gv = ask_all<TensorsDone>(self, peers, [&](uint32_t r) { return TensorsCall::gather_v(mine(r), 1); });
  expect_all_ok(gv);
  EXPECT_TRUE(gv[0].tensors.empty());
  EXPECT_TRUE(gv[2].tensors.empty());
  ASSERT_EQ(gv[1].tensors.size(), 3u);
  EXPECT_EQ(ints(gv[1].tensors[2]), (std::vector<int32_t>{2, 2, 2}));

  // A list, reduced in place: the reply's tensors are the caller's.
  std::vector<std::vector<Tensor>> lists(3);
  for (uint32_t r = 0; r < 3; ++r)
    lists[r] = {Tensor::from(std::vector<int32_t>(3, int32_t(r))), Tensor::from(std::vector<int32_t>(5, int32_t(r + 1)))};
  auto arc = ask_all<TensorsDone>(self, peers, [&](uint32_t r) {
    return TensorsCall::all_reduce_coalesced(std::vector<Tensor>(lists[r].begin(), lists[r].begin() + 1), ReduceOp::max);
  });
  expect_all_ok(arc);
  auto sums = ask_all<TensorsDone>(self, peers, [&](uint32_t r) {
    return TensorsCall::all_reduce_coalesced(std::vector<Tensor>(lists[r].begin() + 1, lists[r].end()), ReduceOp::sum);
  });
  expect_all_ok(sums);
  for (uint32_t r = 0; r < 3; ++r) {
    ASSERT_EQ(arc[r].tensors.size(), 1u);
    EXPECT_EQ(arc[r].tensors[0].data(), lists[r][0].data()) << "in place";
    EXPECT_EQ(ints(lists[r][0]), std::vector<int32_t>(3, 2));
    EXPECT_EQ(ints(sums[r].tensors[0]), std::vector<int32_t>(5, 6));
    EXPECT_EQ(ints(lists[r][1]), std::vector<int32_t>(5, 6));
  }
  // Lists of other lengths: every peer fails alike.
  auto bad = ask_all<TensorsDone>(self, peers, [&](uint32_t r) {
    return TensorsCall::all_reduce_coalesced(std::vector<Tensor>(r + 1, mine(0)), ReduceOp::sum);
  });
  for (auto& d : bad) EXPECT_EQ(d.status().code(), Errc::shape_mismatch) << d.status().to_string();
}

TEST_F(PeerActors, GroupsAreActorsOfTheirOwn) {
  // new_group over peers 2 and 0: two group actors, ranks in member order.
  std::vector<peer_actor> pair_parents{peers[0], peers[2]};
  auto made = ask_all<GroupDone>(self, pair_parents, [](uint32_t) { return GroupCall::new_group({2, 0}); });
  expect_all_ok(made);
  std::vector<peer_actor> pair{made[0].group, made[1].group};
  ASSERT_TRUE(pair[0] && pair[1]);
  auto ready = ask_all<ReadyDone>(self, pair, [](uint32_t) { return ReadyCall{}; });
  EXPECT_EQ(ready[0].rank, 1u);  // peer 0
  EXPECT_EQ(ready[1].rank, 0u);  // peer 2
  EXPECT_EQ(ready[0].members, (std::vector<PeerId>{2, 0}));
  EXPECT_NE(ready[0].group, 0u);
  auto sum = ask_all<OpDone>(self, pair, [](uint32_t i) {
    Tensor t = Tensor::from(std::vector<int32_t>{i == 0 ? 1 : 100});
    return OpCall::all_reduce(t, t, ReduceOp::sum);
  });
  for (auto& d : sum) EXPECT_EQ(ints(d.output), (std::vector<int32_t>{101}));

  // split by parity, keys reversing the order; peer 1 is alone.
  auto halves = ask_all<GroupDone>(self, peers, [](uint32_t r) { return GroupCall::split(int(r % 2), -int(r)); });
  expect_all_ok(halves);
  std::vector<peer_actor> halves_actors{halves[0].group, halves[1].group, halves[2].group};
  auto hready = ask_all<ReadyDone>(self, halves_actors, [](uint32_t) { return ReadyCall{}; });
  EXPECT_EQ(hready[0].members, (std::vector<PeerId>{2, 0}));
  EXPECT_EQ(hready[1].members, (std::vector<PeerId>{1}));
  EXPECT_EQ(hready[2].members, (std::vector<PeerId>{2, 0}));

  // A negative color joins no group: no actor, no error.
  auto some = ask_all<GroupDone>(self, peers, [](uint32_t r) { return GroupCall::split(r == 1 ? -1 : 0, int(r)); });
  expect_all_ok(some);
  EXPECT_FALSE(some[1].group);
  EXPECT_TRUE(some[0].group && some[2].group);

  // In one process: intra_node is everyone; inter_node is rank 0 alone.
  auto intra = ask_all<GroupDone>(self, peers, [](uint32_t) { return GroupCall::intra_node(); });
  expect_all_ok(intra);
  EXPECT_EQ(ask<ReadyDone>(self, intra[1].group, ReadyCall{}).members, (std::vector<PeerId>{0, 1, 2}));
  auto inter = ask_all<GroupDone>(self, peers, [](uint32_t) { return GroupCall::inter_node(); });
  expect_all_ok(inter);
  ASSERT_TRUE(inter[0].group);
  EXPECT_FALSE(inter[1].group);
  EXPECT_FALSE(inter[2].group);
  EXPECT_EQ(ask<ReadyDone>(self, inter[0].group, ReadyCall{}).members, (std::vector<PeerId>{0}));

  // destroy releases the group actor's share; its later ops fail. The world cannot be destroyed.
  auto gone = ask_all<GroupDone>(self, pair, [](uint32_t) { return GroupCall::destroy(); });
  expect_all_ok(gone);
  EXPECT_FALSE(gone[0].group);
  EXPECT_TRUE(has(ask<OpDone>(self, pair[0], OpCall::barrier()).status(), Errc::invalid_argument, {"destroyed"}));
  EXPECT_TRUE(has(ask<GroupDone>(self, peers[1], GroupCall::destroy()).status(), Errc::invalid_argument, {"world"}));
  // A bad member list is the blocking API's error, in the reply.
  EXPECT_TRUE(has(ask<GroupDone>(self, peers[0], GroupCall::new_group({0, 9})).status(), Errc::invalid_argument,
                  {"member 9 is not a peer"}));
}

TEST_F(PeerActors, GradientSyncOwnedByTheActor) {
  EXPECT_TRUE(has(ask<GradDone>(self, peers[0], GradCall::sync()).status(), Errc::invalid_argument, {"no parameters registered"}));
  GradSyncOptions opts;
  opts.op = ReduceOp::sum;
  opts.timeout = 10s;
  auto reg = ask_all<GradDone>(self, peers, [&](uint32_t) {
    return GradCall::register_params({{7, DType::f32, 4}, {3, DType::f32, 2}}, opts);
  });
  expect_all_ok(reg);
  std::vector<Tensor> g7, g3;
  for (uint32_t r = 0; r < 3; ++r) {
    g7.push_back(Tensor::from(std::vector<float>(4, float(r + 1))));
    g3.push_back(Tensor::from(std::vector<float>(2, float(10 * (r + 1)))));
  }
  // Out of registration order, as gradients become ready in a backward pass.
  expect_all_ok(ask_all<GradDone>(self, peers, [&](uint32_t r) { return GradCall::submit(3, g3[r]); }));
  // While the step runs the sync owns the peer: an op request is refused, locally.
  EXPECT_TRUE(has(ask<OpDone>(self, peers[1], OpCall::barrier()).status(), Errc::invalid_argument, {"gradient-sync step"}));
  expect_all_ok(ask_all<GradDone>(self, peers, [&](uint32_t r) { return GradCall::submit(7, g7[r]); }));
  expect_all_ok(ask_all<GradDone>(self, peers, [](uint32_t) { return GradCall::sync(); }));
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(g7[r].to_vector<float>(), std::vector<float>(4, 6.0f));  // copied back
    EXPECT_EQ(g3[r].to_vector<float>(), std::vector<float>(2, 60.0f));
  }
  auto red = ask<GradDone>(self, peers[2], GradCall::reduced(3));
  EXPECT_TRUE(red.status().is_ok()) << red.status().to_string();
  EXPECT_EQ(red.reduced.to_vector<float>(), std::vector<float>(2, 60.0f));
  EXPECT_TRUE(has(ask<GradDone>(self, peers[2], GradCall::reduced(99)).status(), Errc::invalid_argument, {"99"}));
  // After the sync the peer is the actor's again.
  expect_all_ok(ask_all<OpDone>(self, peers, [](uint32_t) { return OpCall::barrier(); }));
  // The sync's options are fixed by the first registration.
  GradSyncOptions other = opts;
  other.bucket_bytes = 64;
  EXPECT_TRUE(has(ask<GradDone>(self, peers[0], GradCall::register_params({{7, DType::f32, 4}}, other)).status(),
                  Errc::invalid_argument, {"same"}));
}

// Registration fails: the Status reaches ReadyCall and every request after it, whatever its kind.
TEST(PeerActorRegistration, FailureAnswersEveryRequest) {
  Runtime rt;
  caf::scoped_actor self{actor_system_of(rt)};
  auto first = rt.register_peer(0, config_for(2, "auto", 10000));
  ASSERT_TRUE(first.is_ok());
  peer_actor late = spawn_peer_actor(rt, 1, config_for(2, "auto", 20000));
  auto why = [](const Status& s) { return has(s, Errc::config_mismatch, {"peer 1", "timeout_ms"}); };
  EXPECT_TRUE(why(ask<ReadyDone>(self, late, ReadyCall{}).status()));
  EXPECT_TRUE(why(ask<OpDone>(self, late, OpCall::barrier()).status()));
  EXPECT_TRUE(why(ask<ByDataDone>(self, late, ByDataCall::broadcast(std::nullopt)).status()));
  EXPECT_TRUE(why(ask<ObjectDone>(self, late, ObjectCall::all_gather("x")).status()));
  EXPECT_TRUE(why(ask<TensorsDone>(self, late, TensorsCall::all_gather_v(Tensor::from(std::vector<int32_t>{1}))).status()));
  EXPECT_TRUE(why(ask<GroupDone>(self, late, GroupCall::split(0, 0)).status()));
  EXPECT_TRUE(why(ask<GradDone>(self, late, GradCall::sync()).status()));

  Config bad = config_for(2);
  bad.num_devices = 0;
  EXPECT_TRUE(has(ask<ReadyDone>(self, spawn_peer_actor(rt, 0, bad), ReadyCall{}).status(), Errc::invalid_config,
                  {"num_devices"}));
}

// Holds the register messages meant for the local server until it gets `open` (the peer actor may
// send its register before or after that), then passes every one on.
using open_atom = caf::atom_constant<caf::atom("open")>;
struct GateState {
  bool open = false;
  std::vector<Call> held;
};
caf::behavior gate(caf::stateful_actor<GateState>* self, caf::actor server) {
  return {
      [=](register_atom a, Call& c) {
        if (self->state.open)
          self->send(server, a, std::move(c));
        else
          self->state.held.push_back(std::move(c));
      },
      [=](open_atom) {
        self->state.open = true;
        for (auto& c : self->state.held) self->send(server, register_atom::value, std::move(c));
        self->state.held.clear();
      },
  };
}

// Spawning returns while the actor's registration is still held; requests sent meanwhile are
// answered once it registers.
TEST(PeerActorRegistration, SpawnReturnsBeforeRegistrationEnds) {
  Runtime rt;
  caf::scoped_actor self{actor_system_of(rt)};
  RuntimeImpl& impl = RuntimeAccess::impl(rt);
  local_server_actor server = impl.server;
  // Before any peer: nobody reads it meanwhile. The gate takes the server's messages untyped.
  caf::actor gated = actor_system_of(rt).spawn(gate, caf::actor_cast<caf::actor>(server));
  impl.server = caf::actor_cast<local_server_actor>(gated);
  peer_actor a = spawn_peer_actor(rt, 0, config_for(1));
  Tensor t = Tensor::from(std::vector<int32_t>{4, 5});
  auto ready = self->request(a, kWait, ReadyCall{});
  auto op = self->request(a, kWait, OpCall::all_reduce(t, t, ReduceOp::sum));
  self->send(gated, open_atom::value);  // only now can the registration end
  ready.receive([](ReadyDone& d) { EXPECT_TRUE(d.status().is_ok()) << d.status().to_string(); },
                [](caf::error& e) { ADD_FAILURE() << to_string(e); });
  op.receive([](OpDone& d) { EXPECT_TRUE(d.status().is_ok()) << d.status().to_string(); },
             [](caf::error& e) { ADD_FAILURE() << to_string(e); });
  EXPECT_EQ(ints(t), (std::vector<int32_t>{4, 5}));
  self->send_exit(gated, caf::exit_reason::user_shutdown);
  impl.server = server;  // registration is over: nobody reads it meanwhile
}

// An actor that exits finishes its peer before its monitors hear of it.
TEST(PeerActorExit, FinishesThePeer) {
  Runtime rt;
  caf::scoped_actor self{actor_system_of(rt)};
  const Config cfg = config_for(2);
  std::vector<peer_actor> peers{spawn_peer_actor(rt, 0, cfg), spawn_peer_actor(rt, 1, cfg)};
  expect_all_ok(ask_all<ReadyDone>(self, peers, [](uint32_t) { return ReadyCall{}; }));
  auto stop = [&](const peer_actor& a) {
    self->monitor(a);
    self->send_exit(a, caf::exit_reason::user_shutdown);
    self->receive([&](caf::down_msg& d) { EXPECT_EQ(d.source, a.address()); });
  };
  stop(peers[0]);
  // Finished (not merely registered): the server says so, and peer 1 still is registered.
  EXPECT_TRUE(has(rt.register_peer(0, cfg).status(), Errc::finished, {"peer 0 has finished"}));
  EXPECT_TRUE(has(rt.register_peer(1, cfg).status(), Errc::register_twice, {"peer 1"}));
  stop(peers[1]);
  // Every peer finished: the collective is over and a new one may register.
  auto again = rt.register_peer(0, cfg);
  EXPECT_TRUE(again.is_ok()) << again.status().to_string();
}

} // namespace
} // namespace chorus
