// One node process of the multi-node tests (multi_node_test.cpp starts the orchestrator and several
// of these). It registers --peers local peers, runs a scenario on every peer thread, verifies
// every result against values computed here independently, and prints one line per peer:
//   PEER <global rank> OK <ops>            every op of the scenario gave the expected result
//   PEER <global rank> ERR <code> <message>  the first op that failed, with its status
// With --exit-when-told 1 it then prints "NODE DONE" and stays in the collective until its stdin
// closes (the test's word that every node is done): a node that left while the others were still
// noticing what went wrong would change what they see ("left" instead).
// Exit status: 0 when every local peer printed OK, 1 otherwise (the failure scenarios included).
// The scenarios: multi_node_peer_ops.cpp (everything works), multi_node_peer_faults.cpp (something
// goes wrong); what they share: multi_node_peer.hpp.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <chorus/runtime.hpp>
#include "multi_node_peer.hpp"
#include "strategies/tuning.hpp"
#include "test_events.hpp"

using namespace chorus;
using namespace chorus::test_node;

namespace {

int parse(int argc, char** argv, Args& a) {
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--orchestrator") a.orchestrator = v;
    else if (k == "--address") a.address = v;
    else if (k == "--secret") a.secret = v;
    else if (k == "--tls-cert") a.tls_cert = v;
    else if (k == "--tls-key") a.tls_key = v;
    else if (k == "--tls-ca") a.tls_ca = v;
    else if (k == "--seal-data") a.seal_data = v == "1";
    else if (k == "--scenario") a.scenario = v;
    else if (k == "--strategy") a.strategy = v;
    else if (k == "--nodes") a.nodes = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--peers") a.peers = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--ops") a.ops = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--timeout-ms") a.timeout_ms = std::stoll(v);
    else if (k == "--victim") a.victim_node = std::stoi(v);
    else if (k == "--at-op") a.at_op = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--elements") a.elements = std::stoul(v);
    else if (k == "--freeze-after-ms") a.freeze_after_ms = std::stoll(v);
    else if (k == "--freeze-when") a.freeze_when = v;
    else if (k == "--op") a.op = v;
    else if (k == "--second-victim") a.second_victim = std::stoi(v);
    else if (k == "--exit-when-told") a.exit_when_told = v == "1";
    else if (k == "--elastic") a.elastic = v == "1";
    else if (k == "--newcomer") a.newcomer = v == "1";
    else if (k == "--transport" && (v == "auto" || v == "network"))
      a.transport = v == "auto" ? HostTransport::automatic : HostTransport::network;
    else {
      std::cerr << "unknown flag " << k << "\n";
      return 2;
    }
  }
  return 0;
}

// The chorus shared-memory segments this process maps (memfd:chorus-shm in /proc/self/maps),
// counted by inode.
std::size_t shared_memory_segments() {
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> inodes;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("/memfd:chorus-shm") == std::string::npos) continue;
    std::istringstream l(line);
    std::string range, perms, offset, dev, inode;
    if (l >> range >> perms >> offset >> dev >> inode) inodes.insert(inode);
  }
  return inodes.size();
}

// Until stdin reaches its end (or brings anything) or `limit` passes; false at the limit.
bool wait_for_word_on_stdin(std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{STDIN_FILENO, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1 << 30)));
    if (ready > 0) return true;  // readable: the end of file, or a word
    if (ready < 0 && errno != EINTR) return true;  // no stdin to wait on
  }
}

} // namespace

int main(int argc, char** argv) {
  Args a;
  if (int rc = parse(argc, argv, a)) return rc;
  Config cfg;
  cfg.num_devices = a.peers;
  cfg.num_nodes = a.nodes;
  cfg.orchestrator_address = a.orchestrator;
  cfg.node_address = a.address;
  cfg.secret = a.secret;
  cfg.tls_certificate = a.tls_cert;
  cfg.tls_key = a.tls_key;
  cfg.tls_ca = a.tls_ca;
  cfg.seal_data = a.seal_data;
  cfg.timeout = std::chrono::milliseconds(a.timeout_ms);
  cfg.host_transport = a.transport;
  cfg.elastic = a.elastic || a.newcomer;
  cfg.newcomer = a.newcomer;
  auto choice = parse_strategy(a.strategy);
  if (!choice) {
    std::cerr << "bad --strategy\n";
    return 2;
  }
  cfg.with_global_strategy(*choice);
  Scenario scenario = op_scenario(a.scenario);
  if (!scenario) scenario = fault_scenario(a.scenario);
  if (!scenario) scenario = elastic_scenario(a.scenario);
  chorus::testing::EventCount entered;  // before rt: its local server raises it until rt is gone
  Runtime rt;
  chorus::testing::count_server_entries(rt, entered);
  const NodeContext node{a, cfg, rt, entered};
  std::vector<int> ok(a.peers, 0);
  std::vector<std::thread> threads;
  for (uint32_t id = 0; id < a.peers; ++id)
    threads.emplace_back([&, id] {
      const auto registering = std::chrono::steady_clock::now();
      auto reg = rt.register_peer(id, cfg);
      if (!reg) {
        say("PEER ? ERR " + std::string(to_string(reg.status().code())) + " " + reg.status().message());
        return;
      }
      Peer p = *reg;
      const std::string me = "PEER " + std::to_string(p.rank()) + " ";
      if (a.newcomer)  // from its registration to its Peer in the grown world
        say(me + "JOINED " + std::to_string(p.size()) + " " +
            std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                                                 registering).count() / 1000.0));
      try {
        if (!scenario) throw Fail{Status(Errc::invalid_argument, "unknown scenario " + a.scenario)};
        const int done = scenario(p, node);
        say(me + "OK " + std::to_string(done));
        ok[id] = 1;
      } catch (const Fail& f) {
        say(me + "ERR " + std::string(to_string(f.status.code())) + " " + f.status.message());
        ok[id] = 2;
      }
    });
  for (auto& t : threads) t.join();
  bool all_ok = true;
  for (int v : ok) all_ok = all_ok && v == 1;
  // How many shared-memory segments (one per data connection to a node of this host) the process
  // maps, while it is still in the collective.
  say("NODE SHM " + std::to_string(shared_memory_segments()));
  if (a.exit_when_told) {
    say("NODE DONE");
    // The test tells every node once all are done; this bound only keeps a lost word from
    // holding the node forever.
    if (!wait_for_word_on_stdin(std::chrono::milliseconds(4 * a.timeout_ms) + std::chrono::seconds(60))) {
      say("NODE was never told to exit");
      return 1;
    }
  }
  return all_ok ? 0 : 1;
}
