// Setting up the data mesh while strangers knock on a node's data port: silent connections, a
// slow talker and garbage are each turned away on their own (HelloGate), so the real nodes still
// connect, long before the setup's deadline; a stranger's socket is closed within kHelloWait; a
// node that never comes is named in the error with what the strangers were told. Connections
// from an address that is no node's are closed at accept, unread.
#include <gtest/gtest.h>

#include <poll.h>
#include <unistd.h>

#include <future>
#include <thread>

#include "mesh/data_hello.hpp"
#include "mesh/data_mesh.hpp"
#include "mesh/hello_gate.hpp"
#include "transport/socket.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;

struct NullSink : FrameSink {
  std::byte* begin_frame(uint32_t, const FrameHeader&) override { return nullptr; }
  void progress(uint32_t, const FrameHeader&, std::size_t) override {}
  void frame_failed(uint32_t, const FrameHeader&) override {}
  void closed(uint32_t, bool, const std::string&) override {}
};

// Two nodes of two hosts (the network path), node 0 listening on `l0`, node 1 on `l1`.
TopologyData topology(uint32_t me, const DataListener& l0, const DataListener& l1) {
  TopologyData t;
  t.collective = 7;
  t.node_id = me;
  t.num_nodes = 2;
  t.total_peers = 2;
  t.token = 0x5eed;
  t.nodes = {{1, 0, l0.address(), 2, 0}, {1, 1, l1.address(), 2, 1}};
  return t;
}

// Node `me` of topology() sets up its data mesh: its status, and whether it holds a connection
// to the other node.
std::pair<Status, bool> set_up_node(const Config& cfg, uint32_t me, const DataListener& l0, const DataListener& l1,
                                    Clock::time_point deadline) {
  NullSink sink;
  std::vector<std::shared_ptr<Connection>> conns;
  Status s = connect_mesh(cfg, topology(me, l0, l1), me == 0 ? l0 : l1, &sink, deadline, conns);
  return {s, conns.size() == 2 && conns[1 - me] != nullptr};
}

// Both nodes of topology() set up their mesh at once (node `first` on a thread of its own, so it
// starts first): whether each succeeded and holds its connection, as one failure message (empty:
// both did).
std::string both_set_up(const Config& cfg, const DataListener& l0, const DataListener& l1, Clock::time_point deadline,
                        uint32_t first = 0) {
  auto node = [&](uint32_t me) { return set_up_node(cfg, me, l0, l1, deadline); };
  auto early = std::async(std::launch::async, node, first);
  auto late = node(1 - first);
  auto early_result = early.get();
  std::string failed;
  for (const auto& [r, who] : {std::pair{early_result, first}, std::pair{late, 1 - first}}) {
    if (!r.first.is_ok()) failed += "node " + std::to_string(who) + ": " + r.first.to_string() + "; ";
    else if (!r.second) failed += "node " + std::to_string(who) + " holds no connection; ";
  }
  return failed;
}

// Two listeners on 127.0.0.1 and a config of the network path: two nodes of two hosts.
struct TwoNodes {
  Result<std::unique_ptr<DataListener>> l0 = DataListener::open("127.0.0.1");
  Result<std::unique_ptr<DataListener>> l1 = DataListener::open("127.0.0.1");
  Config cfg;
  TwoNodes() { cfg.host_transport = HostTransport::network; }
  bool ok() const { return l0.is_ok() && l1.is_ok(); }
};

// A connection to `l`, leaving from `from` (the system's choice when empty).
int connect_to(const DataListener& l, const std::string& from = "") {
  std::string host;
  uint16_t port = 0;
  EXPECT_TRUE(split_host_port(l.address(), host, port));
  int fd = -1;
  EXPECT_TRUE(tcp_connect(host, port, Clock::now() + 5s, fd, from).is_ok());
  return fd;
}

// Whether the other side closed `fd` before the deadline (a read sees the end).
bool closed_by_peer(int fd, Clock::time_point deadline) {
  char b[64];
  for (;;) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (ms <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(ms)) <= 0) continue;
    const ssize_t n = read(fd, b, sizeof b);
    if (n <= 0) return true;
  }
}

TEST(DataMesh, StrangersOnTheDataPortDoNotHoldUpTheNodes) {
  TwoNodes t;
  ASSERT_TRUE(t.ok());
  // Strangers come first: two silent, one that sends garbage, one that sends half a header.
  std::vector<int> strangers{connect_to(**t.l0), connect_to(**t.l0), connect_to(**t.l0), connect_to(**t.l0)};
  ASSERT_EQ(write(strangers[2], "GET / HTTP/1.0\r\n\r\n0123456789abcdef0123456789", 45), 45);
  ASSERT_EQ(write(strangers[3], "\x43\x48", 2), 2);
  // The setup's deadline; the strangers get kHelloWait each.
  EXPECT_EQ(both_set_up(t.cfg, **t.l0, **t.l1, Clock::now() + 30s, 1), "");
  // Both nodes were connected while the strangers were still being waited for: the setup did
  // not wait for them. Each stranger is then closed within its own budget.
  for (int fd : strangers) {
    EXPECT_TRUE(closed_by_peer(fd, Clock::now() + HelloGate::kHelloWait + 5s));
    close(fd);
  }
}

// A flood: more silent strangers than the gate checks at once come before the real node. Those
// beyond kMaxPending wait in the listener's backlog with the node among them (they were once
// closed at once, the node's connection with them: the setup failed); the node gets its turn as
// the first checks end, and the setup completes before its deadline.
TEST(DataMesh, AFloodOfStrangersDelaysTheNodesButDoesNotFailTheSetup) {
  TwoNodes t;
  ASSERT_TRUE(t.ok());
  std::vector<int> strangers;
  for (std::size_t i = 0; i < HelloGate::kMaxPending + 36; ++i) strangers.push_back(connect_to(**t.l0));
  // Node 0's gate takes the strangers first.
  EXPECT_EQ(both_set_up(t.cfg, **t.l0, **t.l1, Clock::now() + 30s), "");
  for (int fd : strangers) close(fd);
}

TEST(DataMesh, ANodeThatNeverComesIsNamedWithWhatTheStrangersWereTold) {
  TwoNodes t;
  ASSERT_TRUE(t.ok());
  int garbage = connect_to(**t.l0);
  ASSERT_EQ(write(garbage, "not a chorus hello, not even close, 32 bytes+", 45), 45);
  const Status s = set_up_node(t.cfg, 0, **t.l0, **t.l1, Clock::now() + 1500ms).first;
  close(garbage);
  EXPECT_EQ(s.code(), Errc::timeout) << s.to_string();
  EXPECT_NE(s.message().find("node 0: no data connection from node 1 within the timeout (1 other connection(s) "
                             "turned away; the first: hello: garbled hello frame)"),
            std::string::npos)
      << s.message();
}

// Strangers at an address that is no node's (127.0.0.2; the nodes are at 127.0.0.1): a flood of
// them before the nodes is closed at accept, each unread and none taking a check's place, so the
// setup goes on as if they were not there; the error of a setup whose node never comes counts them.
TEST(DataMesh, ConnectionsFromNoNodesAddressAreClosedAtOnce) {
  TwoNodes t;
  ASSERT_TRUE(t.ok());
  std::vector<int> strangers;
  for (int i = 0; i < 300; ++i) strangers.push_back(connect_to(**t.l0, "127.0.0.2"));
  for (int fd : strangers) ASSERT_GE(fd, 0);
  const auto t0 = Clock::now();
  EXPECT_EQ(both_set_up(t.cfg, **t.l0, **t.l1, Clock::now() + 30s), "");
  EXPECT_LT(Clock::now() - t0, 2s) << "the strangers held up the nodes";
  for (int fd : strangers) {
    EXPECT_TRUE(closed_by_peer(fd, Clock::now() + 1s)) << "a stranger's connection was left open";
    close(fd);
  }
  // Node 0 alone, its node 1 never coming: the error counts what was closed at once.
  const int one = connect_to(**t.l0, "127.0.0.2");
  const Status s = set_up_node(t.cfg, 0, **t.l0, **t.l1, Clock::now() + 1000ms).first;
  close(one);
  EXPECT_EQ(s.code(), Errc::timeout) << s.to_string();
  EXPECT_NE(s.message().find("(1 connection(s) from addresses of no node closed at once; the first from 127.0.0.2)"),
            std::string::npos)
      << s.message();
}

// Sealed by the secret (Config::seal_data): nodes with the same secret connect through TLS keyed
// by it and the job's token, a stranger who sends a plain hello (what an unsealed node would
// send, with the right token even) is turned away; nodes with different secrets do not connect,
// and the one that connects names the other and TLS; with no secret at all, it is a config error.
TEST(DataMesh, SealedByTheSecretOnlyNodesWithItConnect) {
  TwoNodes t;
  ASSERT_TRUE(t.ok());
  t.cfg.seal_data = true;
  t.cfg.secret = "s3";
  const int plain = connect_to(**t.l0);
  ASSERT_TRUE(send_hello(plain, nullptr, topology(1, **t.l0, **t.l1), Clock::now() + 2s).is_ok());
  EXPECT_EQ(both_set_up(t.cfg, **t.l0, **t.l1, Clock::now() + 30s), "");
  EXPECT_TRUE(closed_by_peer(plain, Clock::now() + HelloGate::kHelloWait + 5s)) << "a plain hello was let in";
  close(plain);

  TwoNodes u;
  ASSERT_TRUE(u.ok());
  Config other = u.cfg;
  u.cfg.seal_data = other.seal_data = true;
  u.cfg.secret = "s3";
  other.secret = "another secret";
  auto accepting = std::async(std::launch::async, [&] { return set_up_node(u.cfg, 0, **u.l0, **u.l1, Clock::now() + 2s); });
  const auto connecting = set_up_node(other, 1, **u.l0, **u.l1, Clock::now() + 2s);
  const auto accepted = accepting.get();
  EXPECT_FALSE(accepted.first.is_ok());
  EXPECT_EQ(connecting.first.code(), Errc::auth_failed) << connecting.first.to_string();
  EXPECT_NE(connecting.first.message().find("data connection to node 0: TLS handshake failed"), std::string::npos)
      << connecting.first.to_string();

  TwoNodes w;
  ASSERT_TRUE(w.ok());
  w.cfg.seal_data = true;
  const Status none = set_up_node(w.cfg, 1, **w.l0, **w.l1, Clock::now() + 2s).first;
  EXPECT_EQ(none.code(), Errc::invalid_config) << none.to_string();
  EXPECT_NE(none.message().find("seal_data"), std::string::npos) << none.to_string();
}

} // namespace
} // namespace chorus
