// chorus-test-node's elastic scenarios (docs/elastic.md): a node killed mid-op, after which the
// survivors shrink and go on in the world of the survivors, every result checked.
#include <signal.h>

#include <chrono>
#include <string>

#include "multi_node_peer.hpp"

namespace chorus::test_node {

namespace {

// All-reduces until, at op --at-op, the peer of rank --victim kills its own process inside the op
// (SIGKILL; shrink-after-freeze: says VICTIM and stops it, SIGSTOP, for the orchestrator's
// heartbeats to find); --second-victim's rank then dies instead of shrinking. Every survivor gets
// node_lost (or revoked, where a node-mate's shrink came first), calls shrink(), prints
//   PEER <old rank> SHRUNK <new rank> <new size> <epoch> <ms from the loss to its first op done>
// and runs --ops all-reduces of --elements in the shrunk world, each checked.
int shrink_after_kill(Peer& p, const NodeContext& node) {
  const Args& a = node.args;
  const std::string me = "PEER " + std::to_string(p.rank()) + " ";
  for (uint32_t i = 0;; ++i) {
    Tensor x = make_input(DType::f32, p.rank(), a.elements, ReduceOp::sum);
    if (i == a.at_op && p.rank() == static_cast<uint32_t>(a.victim_node)) {
      if (a.scenario == "shrink-after-freeze") {
        say(me + "VICTIM");
        raise(SIGSTOP);
      }
      raise(SIGKILL);
    }
    const Status s = p.all_reduce(x, ReduceOp::sum);
    // The loss, or (a node-mate's shrink formed the next epoch while this op was still ending)
    // the old world revoked: either way, shrink (docs/elastic.md, as examples/elastic_training.cpp).
    if (s.code() == Errc::node_lost || s.code() == Errc::revoked) break;
    must(s);
    std::string why;
    verify(check_reduced(x, DType::f32, ReduceOp::sum, p.size(), a.elements, 0, why), "all_reduce", why);
    if (i > a.at_op + 1000) throw Fail{Status(Errc::internal, "no loss came 1000 ops after the kill")};
  }
  const auto lost = std::chrono::steady_clock::now();
  // --second-victim: that rank dies instead of joining the shrink, while the others are in it.
  if (p.rank() == static_cast<uint32_t>(a.second_victim)) raise(SIGKILL);
  auto next = p.shrink();
  must(next.status());
  Peer w = *next;
  for (uint32_t i = 0; i < a.ops; ++i) {
    Tensor x = make_input(DType::f32, w.rank(), a.elements, ReduceOp::sum, i % 5);
    must(w.all_reduce(x, ReduceOp::sum));
    std::string why;
    verify(check_reduced(x, DType::f32, ReduceOp::sum, w.size(), a.elements, i % 5, why), "all_reduce after the shrink",
           why);
    if (i == 0) {
      const auto ms = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - lost).count() / 1000.0;
      say(me + "SHRUNK " + std::to_string(w.rank()) + " " + std::to_string(w.size()) + " " + std::to_string(w.epoch()) +
          " " + std::to_string(ms));
    }
  }
  return static_cast<int>(a.ops);
}

// The members (--elastic 1) all-reduce until every one knows of a newcomer (the max of what each
// heard, in the same op), then grow and print
//   PEER <old rank> GREW <new rank> <new size> <ms of the grow>
// and all run --ops checked all-reduces in the grown world; the newcomer (--newcomer 1, started
// once the members run) does the same ops after its register_peer returned (main says JOINED).
int grow(Peer& p, const NodeContext& node) {
  const Args& a = node.args;
  const std::string me = "PEER " + std::to_string(p.rank()) + " ";
  Peer w = p;
  if (!a.newcomer) {
    say(me + "READY");
    for (uint32_t i = 0;; ++i) {
      Tensor heard = Tensor::from(std::vector<float>{static_cast<float>(p.newcomers())});
      must(p.all_reduce(heard, ReduceOp::max));
      if (heard.data_as<float>()[0] > 0) break;
      if (i > 1000000) throw Fail{Status(Errc::timeout, "no newcomer came")};
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto next = p.grow();
    must(next.status());
    w = *next;
    const auto ms = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count() / 1000.0;
    say(me + "GREW " + std::to_string(w.rank()) + " " + std::to_string(w.size()) + " " + std::to_string(ms));
  }
  for (uint32_t i = 0; i < a.ops; ++i) {
    Tensor x = make_input(DType::f32, w.rank(), a.elements, ReduceOp::sum, i % 5);
    must(w.all_reduce(x, ReduceOp::sum));
    std::string why;
    verify(check_reduced(x, DType::f32, ReduceOp::sum, w.size(), a.elements, i % 5, why), "all_reduce after the grow", why);
  }
  return static_cast<int>(a.ops);
}

} // namespace

Scenario elastic_scenario(const std::string& name) {
  if (name == "shrink-after-kill" || name == "shrink-after-freeze") return shrink_after_kill;
  if (name == "grow") return grow;
  return nullptr;
}

} // namespace chorus::test_node
