// What the files of chorus-test-node share (one node process of the multi-node tests, see
// multi_node_peer.cpp): its flags, the output lines, the expected values every result is checked
// against, and the scenario families: multi_node_peer_ops.cpp (every op, groups, gradient sync,
// strategies: everything must work) and multi_node_peer_faults.cpp (disagreements, a peer that
// stops, a node killed or frozen: every survivor must get the right error).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include <chorus/runtime.hpp>
#include "testkit/reference.hpp"

namespace chorus::testing {
class EventCount;
} // namespace chorus::testing

namespace chorus::test_node {

struct Args {
  std::string tls_cert, tls_key, tls_ca;
  bool seal_data = false;       // --seal-data 1: Config::seal_data (data connections keyed by the secret)
  std::string orchestrator, address = "127.0.0.1", secret, scenario = "every-op", strategy = "auto";
  uint32_t nodes = 0, peers = 1, ops = 100;
  int64_t timeout_ms = 10000;
  int victim_node = -1;  // kill / freeze / mismatch: which node misbehaves (by its first peer's rank)
  uint32_t at_op = 0;
  std::size_t elements = 50000;  // kill / freeze: f32 elements per all-reduce
  int second_victim = -1;  // shrink-after-kill: the rank that dies when it hears of the first loss
  int64_t freeze_after_ms = -1;  // freeze: stop this long into op --at-op (inside it), not before it
  // --freeze-when receiving: freeze: stop inside op --at-op once this node waits there for data
  // (its announcement has left by then), so the others go on sending to a node that takes nothing.
  std::string freeze_when;
  std::string op = "all_reduce";  // --op: the kill and freeze scenarios' op (all_reduce or broadcast from rank 0)
  bool exit_when_told = false;  // after NODE DONE, stay in the collective until stdin closes
  bool elastic = false;         // --elastic 1: Config::elastic (newcomers may join)
  bool newcomer = false;        // --newcomer 1: join the running elastic job (says JOINED, see main)
  HostTransport transport = HostTransport::automatic;  // --transport auto|network
};

// Prints one line at once (peer threads print concurrently).
void say(const std::string& line);

// Small integers, exact in every dtype and summable over 16 peers without overflow (even i8).
int64_t value(uint32_t rank, std::size_t i, ReduceOp op);
Tensor make_input(DType t, uint32_t rank, std::size_t count, ReduceOp op, std::size_t base = 0);
// Element i of the reduction over all n peers (inputs value(r, base + i)).
bool check_reduced(const Tensor& got, DType t, ReduceOp op, uint32_t n, std::size_t count, std::size_t base,
                   std::string& why);

// Element i equals value(rank_of(i), base_of(i)) (gathers, broadcasts, all-to-all).
template <class RankOf, class BaseOf>
bool check_values(const Tensor& got, std::size_t count, RankOf rank_of, BaseOf base_of, std::string& why) {
  for (std::size_t i = 0; i < count; ++i) {
    double have = ref::get_f(DType::f32, got.data(), i);
    double want = static_cast<double>(value(rank_of(i), base_of(i), ReduceOp::sum));
    if (have != want) {
      why = "element " + std::to_string(i) + ": " + std::to_string(have) + " != " + std::to_string(want);
      return false;
    }
  }
  return true;
}

// A scenario's first failure: the peer prints it as its ERR line.
struct Fail {
  Status status;
};

void must(const Status& s);
void verify(bool ok, const std::string& what, const std::string& why);

// What a scenario may use besides its own peer.
struct NodeContext {
  const Args& args;
  const Config& config;
  Runtime& runtime;
  testing::EventCount& entered;  // raised for every op request the node's local server took in
};
// Runs on every local peer's thread; returns the ops done, throws Fail on the first failure.
using Scenario = int (*)(Peer& p, const NodeContext& node);
// The scenario of each family called `name`, or null.
Scenario op_scenario(const std::string& name);
Scenario fault_scenario(const std::string& name);
Scenario elastic_scenario(const std::string& name);  // multi_node_peer_elastic.cpp

} // namespace chorus::test_node
