// Fault injection as a test: 3 node processes (1 to 3 peers each, drawn by the seed) run checked
// all-reduces of mixed sizes (chorus-test-node's `soak`), and at a random moment the harness
// SIGKILLs one node, freezes one (SIGSTOP), or SIGKILLs the orchestrator. For every survivor:
//   a node killed or frozen: every other peer fails with node_lost naming that node's id, within
//     the bound (kill: 5 s; freeze: 10 s, heartbeats), and its process exits by itself;
//   the orchestrator killed: the ops go on and every peer completes them all; every node says at
//     once that the orchestrator is gone;
// and always: no process left behind, /dev/shm as before. The seed (and so the case) is in the
// test's name: FaultInjection/Seeded.Fault/7 is seed 7. `scripts/fault_soak.sh N` runs N seeds.
#include <signal.h>

#include <cstdio>
#include <random>

#include "multi_node_fixture.hpp"

namespace chorus::multi_node {
namespace {

enum class Fault { kill, freeze, orchestrator };
const char* name(Fault f) { return f == Fault::kill ? "kill" : f == Fault::freeze ? "freeze" : "orchestrator kill"; }

class Seeded : public MultiNode, public ::testing::WithParamInterface<int> {};

// Seeds from CHORUS_FAULT_SEED_BASE on (default 0): the soak script moves the window.
int seed_of(int param) {
  const char* base = std::getenv("CHORUS_FAULT_SEED_BASE");
  return param + (base ? std::atoi(base) : 0);
}

TEST_P(Seeded, Fault) {
  const int seed = seed_of(GetParam());
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const Fault fault = static_cast<Fault>(rng() % 3);
  std::vector<int> peers{static_cast<int>(1 + rng() % 3), static_cast<int>(1 + rng() % 3),
                         static_cast<int>(1 + rng() % 3)};
  const int total = peers[0] + peers[1] + peers[2];
  const auto delay = std::chrono::milliseconds(20 + rng() % 400);
  const uint32_t victim_node = rng() % 3;
  SCOPED_TRACE("seed " + std::to_string(seed) + ": " + name(fault) + " after " + std::to_string(delay.count()) +
               " ms, peers " + std::to_string(peers[0]) + "," + std::to_string(peers[1]) + "," + std::to_string(peers[2]) +
               (fault == Fault::orchestrator ? "" : ", node " + std::to_string(victim_node)));

  start_orchestrator(3);
  const auto shm_before = dev_shm_entries();
  setenv("CHORUS_DEBUG", "warn", 1);
  const std::string ops = fault == Fault::orchestrator ? "200" : "1000000";
  auto kids = spawn_nodes({{"--peers", std::to_string(peers[0])}, {"--peers", std::to_string(peers[1])},
                           {"--peers", std::to_string(peers[2])}},
                          {"--scenario", "soak", "--ops", ops, "--at-op", std::to_string(seed), "--timeout-ms", "30000"});
  unsetenv("CHORUS_DEBUG");
  TimedOutput out(kids);
  // Every peer is in the job and running ops: each said which node it is on.
  auto all_on = [&] {
    int n = 0;
    for (int r = 0; r < total; ++r) n += out.find("PEER " + std::to_string(r) + " ON NODE ") != nullptr;
    return n == total;
  };
  ASSERT_TRUE(out.read_until(all_on, Clock::now() + 60s)) << out.dump();
  // Each rank's node, and which process is which node (node ids come in order of arrival).
  std::vector<uint32_t> node_of(total);
  std::vector<std::size_t> process_of(3, SIZE_MAX);
  for (int r = 0; r < total; ++r) {
    const auto* l = out.find("PEER " + std::to_string(r) + " ON NODE ");
    node_of[r] = static_cast<uint32_t>(std::stoul(l->text.substr(l->text.rfind(' ') + 1)));
    process_of[node_of[r]] = l->node;
  }
  for (auto p : process_of) ASSERT_NE(p, SIZE_MAX) << out.dump();

  // The random moment: the point of the harness is that it falls anywhere in the ops.
  out.read_until([] { return false; }, Clock::now() + delay);
  const auto injected = Clock::now();
  const pid_t victim = fault == Fault::orchestrator ? orch_.pid : kids[process_of[victim_node]].pid;
  ASSERT_EQ(kill(victim, fault == Fault::freeze ? SIGSTOP : SIGKILL), 0);
  if (fault == Fault::orchestrator) orch_.pid = -1;  // reaped below, not by the guard

  // Every survivor peer ends: with its error (kill, freeze) or its last op (orchestrator).
  std::vector<int> survivors;
  for (int r = 0; r < total; ++r)
    if (fault == Fault::orchestrator || node_of[r] != victim_node) survivors.push_back(r);
  auto ended = [&](int r) {
    const std::string p = "PEER " + std::to_string(r) + " ";
    return out.find(p + "OK ") || out.find(p + "ERR ");
  };
  const auto bound = fault == Fault::kill ? 5s : fault == Fault::freeze ? 10s : 60s;
  const bool all_ended = out.read_until(
      [&] {
        for (int r : survivors)
          if (!ended(r)) return false;
        return true;
      },
      injected + bound);
  const auto took = Clock::now() - injected;
  std::printf("seed %d: %s of %s after %lld ms; survivors ended %lld ms after it\n", seed, name(fault),
              fault == Fault::orchestrator ? "the orchestrator" : ("node " + std::to_string(victim_node)).c_str(),
              static_cast<long long>(delay.count()),
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
  if (fault == Fault::freeze) kill(victim, SIGKILL);  // thawed never: it goes now
  if (fault == Fault::orchestrator) wait_or_kill(victim, 5000ms);
  tell_nodes_to_exit();
  // No orphan: every survivor exits by itself once told; the victim is reaped.
  for (std::size_t i = 0; i < kids.size(); ++i) {
    out.read_until([&] { return out.ended(i); }, Clock::now() + 20s);
    const int status = wait_or_kill(kids[i].pid, 20000ms);
    const bool is_victim = fault != Fault::orchestrator && i == process_of[victim_node];
    if (!is_victim) EXPECT_GE(status, 0) << "node process " << i << " had to be killed\n" << out.dump();
  }
  ASSERT_TRUE(all_ended) << "survivors still running " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                         << " ms after the fault\n"
                         << out.dump();
  for (int r : survivors) {
    const std::string p = "PEER " + std::to_string(r) + " ";
    if (fault == Fault::orchestrator) {
      EXPECT_TRUE(out.find(p + "OK " + ops)) << "rank " << r << "\n" << out.dump();
      continue;
    }
    const auto* l = out.find(p + "ERR ");
    ASSERT_NE(l, nullptr) << "rank " << r << " completed ops it could not have\n" << out.dump();
    EXPECT_EQ(l->text.rfind(p + "ERR node_lost ", 0), 0u) << l->text;
    EXPECT_NE(l->text.find("node " + std::to_string(victim_node)), std::string::npos)
        << "rank " << r << " names the wrong node: " << l->text;
  }
  if (fault == Fault::orchestrator)
    for (std::size_t i = 0; i < kids.size(); ++i)
      EXPECT_TRUE(out.said(i, "orchestrator lost")) << "node process " << i << " did not say so\n" << out.dump();
  EXPECT_EQ(dev_shm_entries(), shm_before);
}

INSTANTIATE_TEST_SUITE_P(FaultInjection, Seeded, ::testing::Range(0, 20));

} // namespace
} // namespace chorus::multi_node
