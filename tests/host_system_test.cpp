// A Runtime on the host app's own caf::actor_system: ops and peer actors work whatever the host's
// scheduler (even CAF's test coordinator, which runs nothing unless told), the runtime stops its
// actors when it is destroyed (or the host's ~actor_system would wait for them forever), and
// multi-node mode asks for the middleman.
#include <gtest/gtest.h>

#include <caf/io/middleman.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include <chorus/chorus.hpp>
#include <chorus/caf.hpp>
#include "actors/orchestrator/orchestrator.hpp"
#include "actors/orchestrator/published.hpp"
#include "runtime/runtime_impl.hpp"
#include "orchestrator_fixtures.hpp"
#include "peer_harness.hpp"
#include "status_matchers.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;
using harness::config_for;
using harness::run_peers;

struct QuietConfig : caf::actor_system_config {
  QuietConfig() { set("logger.verbosity", caf::atom("quiet")); }
};

void all_reduce_on_threads(Runtime& rt) {
  run_peers(rt, config_for(3), [](Peer& p) {
    Tensor t = Tensor::from(std::vector<int64_t>{int64_t(p.id()) + 1, 10});
    Status s = p.all_reduce(t, ReduceOp::sum);
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    EXPECT_EQ(t.to_vector<int64_t>(), (std::vector<int64_t>{6, 30}));
  });
}

// The host's default scheduler (work stealing): peers on threads and a peer actor both work, and
// the runtime says which system it runs in.
TEST(HostSystem, PeersAndPeerActorsRunInTheHostsSystem) {
  QuietConfig cfg;
  caf::actor_system sys{cfg};
  Runtime rt{host_system(sys)};
  EXPECT_EQ(&actor_system_of(rt), &sys);
  all_reduce_on_threads(rt);
  caf::scoped_actor self{sys};
  peer_actor a = spawn_peer_actor(rt, 0, config_for(1));
  Tensor t = Tensor::from(std::vector<int32_t>{3, 4});
  self->request(a, 20s, OpCall::all_reduce(t, t, ReduceOp::max))
      .receive([](OpDone& d) { EXPECT_TRUE(d.status().is_ok()) << d.status().to_string(); },
               [](caf::error& e) { ADD_FAILURE() << to_string(e); });
  EXPECT_EQ(t.to_vector<int32_t>(), (std::vector<int32_t>{3, 4}));
}

// The test coordinator runs no job unless the test asks: every op still completes, since the
// server, the peers and the peer actors (detached) never wait on the host's scheduler.
TEST(HostSystem, OpsNeverWaitOnTheHostsScheduler) {
  QuietConfig cfg;
  cfg.set("scheduler.policy", caf::atom("testing"));
  caf::actor_system sys{cfg};
  Runtime rt{host_system(sys)};
  all_reduce_on_threads(rt);
  {
    caf::scoped_actor self{sys};
    peer_actor a = spawn_peer_actor(rt, 0, config_for(1));
    self->request(a, 20s, ReadyCall{}).receive([](ReadyDone& d) { EXPECT_TRUE(d.status().is_ok()) << d.status().to_string(); },
                                               [](caf::error& e) { ADD_FAILURE() << to_string(e); });
  }
  auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  EXPECT_FALSE(sched.has_job());
}

// Destroying the Runtime stops every actor it spawned in the host's system (peer actors, group
// actors, the local server); the host's own actors keep running.
TEST(HostSystem, RuntimeStopsItsActorsWhenDestroyed) {
  QuietConfig cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto host_actor = sys.spawn([]() -> caf::behavior { return {[](int x) { return x + 1; }}; });
  std::vector<peer_actor> peers;
  {
    Runtime rt{host_system(sys)};
    const Config c = config_for(2);
    peers = {spawn_peer_actor(rt, 0, c), spawn_peer_actor(rt, 1, c)};
    std::vector<decltype(self->request(peers[0], 20s, GroupCall::new_group({1, 0})))> made;
    for (auto& p : peers) made.push_back(self->request(p, 20s, GroupCall::new_group({1, 0})));
    for (auto& m : made)
      m.receive(
          [&](GroupDone& d) {
            EXPECT_TRUE(d.status().is_ok()) << d.status().to_string();
            peers.push_back(d.group);
          },
          [](caf::error& e) { ADD_FAILURE() << to_string(e); });
    ASSERT_EQ(peers.size(), 4u);
    for (auto& p : peers) self->monitor(p);
  }
  // Every one of them exits (and the host's ~actor_system, at the end of the test, ends).
  std::size_t down = 0;
  for (std::size_t i = 0; i < peers.size(); ++i)
    self->receive([&](caf::down_msg&) { ++down; }, caf::after(20s) >> [] {});
  EXPECT_EQ(down, peers.size());
  self->request(host_actor, 20s, 41).receive([](int y) { EXPECT_EQ(y, 42); },
                                             [](caf::error& e) { ADD_FAILURE() << to_string(e); });
  self->send_exit(host_actor, caf::exit_reason::user_shutdown);
}

Config multi_node(uint16_t orchestrator_port) {
  Config c = config_for(1, "auto", 300);
  c.num_nodes = 2;
  c.orchestrator_address = "127.0.0.1:" + std::to_string(orchestrator_port);
  c.node_address = "127.0.0.1";
  return c;
}

// A port nobody listens on (bound, then released).
uint16_t closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

TEST(HostSystem, MultiNodeWithoutTheMiddlemanIsAConfigError) {
  QuietConfig cfg;
  caf::actor_system sys{cfg};
  ASSERT_FALSE(sys.has_middleman());
  Runtime rt{host_system(sys)};
  EXPECT_TRUE(has(rt.register_peer(0, multi_node(closed_port())).status(), Errc::invalid_config,
                  {"middleman", "cfg.load<caf::io::middleman>()"}));
  // A peer actor registering the same way gets the same answer.
  caf::scoped_actor self{sys};
  self->request(spawn_peer_actor(rt, 0, multi_node(closed_port())), 20s, ReadyCall{})
      .receive([](ReadyDone& d) { EXPECT_TRUE(has(d.status(), Errc::invalid_config, {"middleman"})); },
               [](caf::error& e) { ADD_FAILURE() << to_string(e); });
  // Single-node mode needs no middleman.
  all_reduce_on_threads(rt);
}

TEST(HostSystem, AMiddlemanAloneIsNotEnoughPrepareIs) {
  QuietConfig cfg;
  cfg.load<caf::io::middleman>();
  caf::actor_system sys{cfg};
  ASSERT_TRUE(sys.has_middleman());
  Runtime rt{host_system(sys)};
  EXPECT_TRUE(has(rt.register_peer(0, multi_node(closed_port())).status(), Errc::invalid_config,
                  {"message type", "prepare_actor_system"}));
}

TEST(HostSystem, MultiNodeWithAPreparedConfigGoesOnToTheOrchestrator) {
  const Config config = multi_node(closed_port());
  QuietConfig cfg;
  prepare_actor_system(cfg, config);
  caf::actor_system sys{cfg};
  ASSERT_TRUE(sys.has_middleman());
  Runtime rt{host_system(sys)};
  // Past the check: the registration tries the (absent) orchestrator.
  EXPECT_TRUE(has(rt.register_peer(0, config).status(), Errc::unreachable, {"orchestrator"}));
}

TEST(HostSystem, TlsFilesNeedATlsSystem) {
  Config config = multi_node(closed_port());
  QuietConfig cfg;
  prepare_actor_system(cfg, config);  // prepared without TLS files
  caf::actor_system sys{cfg};
  Runtime rt{host_system(sys)};
  config.tls_certificate = "node.pem";
  config.tls_key = "node.key";
  config.tls_ca = "ca.pem";
  EXPECT_TRUE(has(rt.register_peer(0, config).status(), Errc::invalid_config, {"TLS files are set"}));
}

// A Runtime serves one kind of collective for its life: its local server cannot run a
// one-process collective's ops and a node's at once, in its own system or the host's.
TEST(OwnSystem, AMultiNodeRegistrationAfterAOneProcessOneIsAConfigError) {
  Runtime rt;
  Config one;
  one.num_devices = 1;
  auto p = rt.register_peer(0, one);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_TRUE(has(rt.register_peer(0, multi_node(closed_port())).status(), Errc::invalid_config,
                  {"serves a one-process collective", "multi-node registration", "Runtime of its own"}));
  ASSERT_TRUE(p->finish().is_ok());  // also once every peer finished
  EXPECT_TRUE(has(rt.register_peer(0, multi_node(closed_port())).status(), Errc::invalid_config,
                  {"serves a one-process collective"}));
}

TEST(OwnSystem, AOneProcessRegistrationAfterAMultiNodeOneIsAConfigError) {
  Runtime rt;
  ASSERT_EQ(rt.register_peer(0, multi_node(closed_port())).status().code(), Errc::unreachable);
  Config one;
  one.num_devices = 1;
  EXPECT_TRUE(has(rt.register_peer(0, one).status(), Errc::invalid_config,
                  {"serves a multi-node collective", "one-process registration"}));
}

// The runtime's own system is made by its first use: asking for it first makes a one-process
// system, which a multi-node registration then cannot use.
TEST(OwnSystem, AskingForTheActorSystemFirstMakesAOneProcessSystem) {
  Runtime rt;
  caf::actor_system& sys = actor_system_of(rt);
  EXPECT_FALSE(sys.has_middleman());
  EXPECT_TRUE(has(rt.register_peer(0, multi_node(closed_port())).status(), Errc::invalid_config,
                  {"started for one process", "first use"}));
}

TEST(HostSystem, APreparedHostAlsoServesOneKindOfCollective) {
  const Config config = multi_node(closed_port());
  QuietConfig cfg;
  prepare_actor_system(cfg, config);
  caf::actor_system sys{cfg};
  Runtime rt{host_system(sys)};
  Config one;
  one.num_devices = 1;
  auto p = rt.register_peer(0, one);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_TRUE(has(rt.register_peer(0, config).status(), Errc::invalid_config, {"serves a one-process collective"}));
  EXPECT_TRUE(p->finish().is_ok());
}

// A host config that has the middleman and chorus's message type but sends no heartbeats would be
// dropped by the orchestrator as silent: refused up front.
TEST(HostSystem, AHostWithoutHeartbeatsIsAConfigError) {
  const Config config = multi_node(closed_port());
  QuietConfig cfg;
  prepare_actor_system(cfg, config);
  cfg.set("middleman.heartbeat-interval", caf::timespan{0});
  caf::actor_system sys{cfg};
  Runtime rt{host_system(sys)};
  EXPECT_TRUE(has(rt.register_peer(0, config).status(), Errc::invalid_config, {"heartbeats"}));
}

// A node joins once: when the join fails, every other registration of the node gets the same
// error rather than trying again on its own (which could make half a node join the collective).
TEST(OwnSystem, AFailedJoinFailsEveryRegistrationOfTheNodeAlike) {
  Runtime rt;
  Config c = multi_node(closed_port());
  c.num_devices = 2;
  auto first = rt.register_peer(0, c);
  ASSERT_FALSE(first.is_ok());
  EXPECT_EQ(first.status().code(), Errc::unreachable) << first.status().to_string();
  RuntimeImpl& impl = RuntimeAccess::impl(rt);
  ASSERT_TRUE(impl.join_outcome.has_value());  // the node's one join, and what it came to
  EXPECT_EQ(*impl.join_outcome, first.status());
  auto second = rt.register_peer(1, c);
  EXPECT_EQ(second.status(), first.status());
  EXPECT_EQ(impl.global, nullptr);
}

// Two registrations of one node at once: the first joins for the node, the second waits for that
// join and gets its outcome (here a timeout: the other node never comes) instead of joining again.
TEST(OwnSystem, ARegistrationWhileTheNodeJoinsGetsThatJoinsOutcome) {
  testing::System orch_sys;
  auto orch = orch_sys->spawn(orchestrator, OrchestratorCore::Options{2, 30s, {}});
  auto published = PublishedOrchestrator::publish(*orch_sys, orch, {});
  ASSERT_TRUE(published) << published.status().to_string();
  Config c = multi_node((*published)->port());
  c.num_devices = 2;
  c.timeout = 2000ms;  // how long the first registration's join waits for the absent node
  Runtime rt;
  RuntimeImpl& impl = RuntimeAccess::impl(rt);
  Status first;
  std::thread joiner([&] { first = rt.register_peer(0, c).status(); });
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  auto joining = [&] {
    std::lock_guard<std::mutex> lk(impl.global_mu);
    return impl.joining && !impl.join_outcome;
  };
  // The first registration's request is at the orchestrator before the second comes.
  caf::scoped_actor self{*orch_sys};
  uint64_t registered = 0;
  while (registered == 0 && std::chrono::steady_clock::now() < give_up) {
    self->request(orch, 5s, caf::get_atom::value)
        .receive([&](uint64_t, uint64_t n, bool) { registered = n; }, [](caf::error&) {});
    if (registered == 0) std::this_thread::yield();
  }
  if (registered != 1u || !joining()) {
    ADD_FAILURE() << "the first registration's join never reached the orchestrator, or ended already";
    joiner.join();
    return;
  }
  const Status second = rt.register_peer(1, c).status();
  joiner.join();
  EXPECT_TRUE(has(first, Errc::timeout, {"did not answer the registration"}));
  // The same outcome, word for word: a join of its own would have been refused as a second join
  // of the node, or timed out after a different wait.
  EXPECT_EQ(second, first);
  caf::anon_send_exit(orch, caf::exit_reason::user_shutdown);
}

} // namespace
} // namespace chorus
