// Fault injection as a test: 3 node processes (1 to 3 peers each, drawn by the seed) run checked
// all-reduces of mixed sizes and rounds of send/recv between the nodes (chorus-test-node's `soak`;
// all-reduces alone where the link stalls), and at a random moment the harness
// SIGKILLs one node, freezes one (SIGSTOP), SIGKILLs the orchestrator, closes the data connection
// between two nodes (ss -K: that node reads ECONNABORTED, the other a reset) or stalls it (nftables
// drops its packets both ways; the connection stays open). For every survivor:
//   a node killed or frozen: every other peer fails with node_lost naming that node's id, within
//     the bound (kill: 5 s; freeze: 10 s, heartbeats), and its process exits by itself;
//   the orchestrator killed: the ops go on and every peer completes them all; every node says at
//     once that the orchestrator is gone;
//   a data connection closed: every peer of every node (all survive) fails with node_lost naming
//     the link, "the data connection between node A and node B broke (node A saw: ...)", within
//     5 s: the two ends at once, the third node through the orchestrator (its op timeout is 30 s);
//   a data connection stalled: the op timeout is the detector (3 s here; nothing on the data path
//     watches a silent link), so every peer fails within it + 5 s, with node_lost naming the link
//     (the end whose bytes got stuck cuts it off and tells everyone) or with the timeout of the op
//     it was in, whichever comes first at its node: every node's op runs out at about the same
//     moment, and an end that only waited to receive cannot tell a stalled link from a slow sender;
// and after a kill, a freeze or a link fault, every peer's next op fails with node_lost naming the
// same node or link (a stall too: what every later op reports once the node has heard of it).
// and always: no process left behind, /dev/shm as before, no nftables rule left. The link faults
// run the job with --transport network (on one host the bytes would otherwise go through shared
// memory, and a socket would only carry wake-ups), and need root with ss -K and nft: without, they
// are skipped, saying why. The seed (and so the case) is in the test's name:
// FaultInjection/Seeded.Fault/7 is seed 7. `scripts/fault_soak.sh N` runs N seeds.
#include <signal.h>

#include <cstdio>
#include <optional>
#include <random>

#include "link_faults.hpp"
#include "multi_node_fixture.hpp"

namespace chorus::multi_node {
namespace {

enum class Fault { kill, freeze, orchestrator, link_closed, link_stalled };
const char* name(Fault f) {
  switch (f) {
    case Fault::kill: return "kill";
    case Fault::freeze: return "freeze";
    case Fault::orchestrator: return "orchestrator kill";
    case Fault::link_closed: return "closed data connection";
    default: return "stalled data connection";
  }
}

class Seeded : public MultiNode, public ::testing::WithParamInterface<int> {};

// Seeds from CHORUS_FAULT_SEED_BASE on (default 0): the soak script moves the window.
int seed_of(int param) {
  const char* base = std::getenv("CHORUS_FAULT_SEED_BASE");
  return param + (base ? std::atoi(base) : 0);
}

TEST_P(Seeded, Fault) {
  const int seed = seed_of(GetParam());
  std::mt19937 rng(static_cast<uint32_t>(seed));
  Fault fault = static_cast<Fault>(rng() % 3);
  std::vector<int> peers{static_cast<int>(1 + rng() % 3), static_cast<int>(1 + rng() % 3),
                         static_cast<int>(1 + rng() % 3)};
  const int total = peers[0] + peers[1] + peers[2];
  const auto delay = std::chrono::milliseconds(20 + rng() % 400);
  const uint32_t victim_node = rng() % 3;
  // Link faults are drawn after the rest, so a seed that keeps its kind keeps its whole case: two
  // in five become one, between the victim node and another.
  const uint32_t link_draw = rng() % 5;
  const uint32_t other_node = (victim_node + 1 + rng() % 2) % 3;
  if (link_draw < 2) fault = link_draw == 0 ? Fault::link_closed : Fault::link_stalled;
  // CHORUS_FAULT_KIND=kill|freeze|orchestrator|closed|stalled: every seed injects that kind (the
  // rest of its case as drawn); `scripts/fault_soak.sh N BASE kill` runs N kills.
  if (const char* only = std::getenv("CHORUS_FAULT_KIND"); only && *only) {
    const std::string k = only;
    const std::optional<Fault> forced = k == "kill"           ? std::optional(Fault::kill)
                                        : k == "freeze"       ? std::optional(Fault::freeze)
                                        : k == "orchestrator" ? std::optional(Fault::orchestrator)
                                        : k == "closed"       ? std::optional(Fault::link_closed)
                                        : k == "stalled"      ? std::optional(Fault::link_stalled)
                                                              : std::nullopt;
    ASSERT_TRUE(forced) << "CHORUS_FAULT_KIND '" << k << "': one of kill, freeze, orchestrator, closed, stalled";
    fault = *forced;
  }
  const bool link = fault == Fault::link_closed || fault == Fault::link_stalled;
  const std::string link_name = "the data connection between node " + std::to_string(std::min(victim_node, other_node)) +
                                " and node " + std::to_string(std::max(victim_node, other_node)) + " broke (node ";
  SCOPED_TRACE("seed " + std::to_string(seed) + ": " + name(fault) + " after " + std::to_string(delay.count()) +
               " ms, peers " + std::to_string(peers[0]) + "," + std::to_string(peers[1]) + "," + std::to_string(peers[2]) +
               (fault == Fault::orchestrator ? "" : ", node " + std::to_string(victim_node)) +
               (link ? " and node " + std::to_string(other_node) : ""));
  if (link)
    if (const std::string why = link_tools_missing(fault == Fault::link_stalled); !why.empty())
      GTEST_SKIP() << "seed " << seed << ": cannot inject a " << name(fault) << " on this machine: " << why;

  start_orchestrator(3);
  const auto shm_before = dev_shm_entries();
  setenv("CHORUS_DEBUG", "warn", 1);
  // The orchestrator's kill ends nothing: its peers run 100 ops (about 1.7 s here; the kill falls
  // 20-420 ms in) and must complete them all.
  const std::string ops = fault == Fault::orchestrator ? "100" : "1000000";
  const auto op_timeout = fault == Fault::link_stalled ? 3000ms : 30000ms;
  std::vector<std::string> common{"--scenario", fault == Fault::link_stalled ? "soak-collectives" : "soak", "--ops", ops, "--at-op", std::to_string(seed),
                                  "--timeout-ms", std::to_string(op_timeout.count())};
  if (link) common.insert(common.end(), {"--transport", "network"});
  auto kids = spawn_nodes({{"--peers", std::to_string(peers[0])}, {"--peers", std::to_string(peers[1])},
                           {"--peers", std::to_string(peers[2])}},
                          common);
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
  // The link's connection, found before the moment so that the moment stays where it was drawn.
  std::optional<std::pair<uint16_t, uint16_t>> ports;
  if (link) {
    ports = data_connection(kids[process_of[victim_node]].pid, kids[process_of[other_node]].pid);
    ASSERT_TRUE(ports) << "no data connection between the processes of node " << victim_node << " and node "
                       << other_node << " in ss -tnp";
  }
  out.read_until([] { return false; }, Clock::now() + delay);
  const auto injected = Clock::now();
  const pid_t victim = fault == Fault::orchestrator ? orch_.pid : kids[process_of[victim_node]].pid;
  std::optional<Stall> stall;
  if (fault == Fault::link_closed) {
    ASSERT_TRUE(destroy_socket(ports->first, ports->second)) << "ss -K did not close port " << ports->first;
  } else if (fault == Fault::link_stalled) {
    stall.emplace(ports->first, ports->second);
    ASSERT_TRUE(stall->ok()) << "nft could not add the stall's rules";
  } else {
    ASSERT_EQ(kill(victim, fault == Fault::freeze ? SIGSTOP : SIGKILL), 0);
  }
  if (fault == Fault::orchestrator) orch_.pid = -1;  // reaped below, not by the guard

  // Every survivor peer ends: with its error (kill, freeze, link) or its last op (orchestrator).
  std::vector<int> survivors;
  for (int r = 0; r < total; ++r)
    if (fault == Fault::orchestrator || link || node_of[r] != victim_node) survivors.push_back(r);
  auto ended = [&](int r) {
    const std::string p = "PEER " + std::to_string(r) + " ";
    return out.find(p + "OK ") || out.find(p + "ERR ");
  };
  const std::chrono::milliseconds bound = fault == Fault::kill || fault == Fault::link_closed ? 5s
                                          : fault == Fault::freeze                             ? 10s
                                          : fault == Fault::link_stalled                       ? op_timeout + 5s
                                                                                               : 60s * kWorkSlowdown;
  const bool all_ended = out.read_until(
      [&] {
        for (int r : survivors)
          if (!ended(r)) return false;
        return true;
      },
      injected + bound);
  const auto took = Clock::now() - injected;
  const std::string whom = fault == Fault::orchestrator ? "the orchestrator"
                           : link ? "node " + std::to_string(victim_node) + " to node " + std::to_string(other_node)
                                  : "node " + std::to_string(victim_node);
  std::printf("seed %d: %s of %s after %lld ms; survivors ended %lld ms after it\n", seed, name(fault), whom.c_str(),
              static_cast<long long>(delay.count()),
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
  if (fault == Fault::freeze) kill(victim, SIGKILL);  // thawed never: it goes now
  const uint64_t dropped = stall ? stall->dropped() : 0;
  if (stall) stall->lift();  // the nodes leave in order once their packets flow again
  if (fault == Fault::orchestrator) wait_or_kill(victim, 5000ms);
  tell_nodes_to_exit();
  // No orphan: every survivor exits by itself once told; the victim is reaped.
  for (std::size_t i = 0; i < kids.size(); ++i) {
    out.read_until([&] { return out.ended(i); }, Clock::now() + 20s);
    const int status = wait_or_kill(kids[i].pid, 20000ms);
    const bool is_victim = (fault == Fault::kill || fault == Fault::freeze) && i == process_of[victim_node];
    if (!is_victim) {
      EXPECT_GE(status, 0) << "node process " << i << " had to be killed\n" << out.dump();
    }
  }
  ASSERT_TRUE(all_ended) << "survivors still running " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                         << " ms after the fault\n"
                         << out.dump();
  int timed_out = 0;  // stall: peers whose op timed out before they heard of the link
  std::string timeouts;  // which, on which node
  for (int r : survivors) {
    const std::string p = "PEER " + std::to_string(r) + " ";
    if (fault == Fault::orchestrator) {
      EXPECT_TRUE(out.find(p + "OK " + ops)) << "rank " << r << "\n" << out.dump();
      continue;
    }
    const auto* l = out.find(p + "ERR ");
    ASSERT_NE(l, nullptr) << "rank " << r << " completed ops it could not have\n" << out.dump();
    // The op after it reports what the node heard of the fault (every node, a stall too).
    const auto* next = out.find(p + "NEXT ");
    ASSERT_NE(next, nullptr) << "rank " << r << " did not report its next op\n" << out.dump();
    EXPECT_EQ(next->text.rfind(p + "NEXT node_lost ", 0), 0u) << next->text;
    if (fault == Fault::link_stalled && l->text.rfind(p + "ERR timeout ", 0) == 0) {
      ++timed_out;
      timeouts += (timeouts.empty() ? "" : "; ") + std::string("node ") + std::to_string(node_of[r]) + ": " +
                  l->text.substr(p.size() + 4);
    } else {
      EXPECT_EQ(l->text.rfind(p + "ERR node_lost ", 0), 0u) << l->text;
    }
    for (const auto* said : {l, next}) {
      if (said->text.rfind(p + "ERR timeout ", 0) == 0) continue;
      if (link)
        EXPECT_NE(said->text.find(link_name), std::string::npos)
            << "rank " << r << " does not name the link: " << said->text << "\n" << out.dump();
      else
        EXPECT_NE(said->text.find("node " + std::to_string(victim_node)), std::string::npos)
            << "rank " << r << " names the wrong node: " << said->text;
    }
  }
  if (fault == Fault::link_stalled) {
    EXPECT_GT(dropped, 0u) << "the stall dropped no packet";
    std::printf("  (stall of seed %d: %d of %zu peers timed out first%s%s, %llu packets dropped)\n", seed, timed_out,
                survivors.size(), timeouts.empty() ? "" : ": ", timeouts.c_str(), static_cast<unsigned long long>(dropped));
  }
  if (fault == Fault::orchestrator) {
    for (std::size_t i = 0; i < kids.size(); ++i) {
      EXPECT_TRUE(out.said(i, "orchestrator lost")) << "node process " << i << " did not say so\n" << out.dump();
    }
  }
  EXPECT_EQ(dev_shm_entries(), shm_before);
}

INSTANTIATE_TEST_SUITE_P(FaultInjection, Seeded, ::testing::Range(0, 20));

} // namespace
} // namespace chorus::multi_node
