#include "node_run.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <chorus/chorus.hpp>
#include "op_runner.hpp"
#include "report.hpp"
#include "sweep.hpp"

namespace chorus::bench {

namespace {

// What the node's peer threads share besides the sweep: the joining phase (every local peer),
// then the sweep of this node's members, made once they are known (global ids come with
// registration).
struct Node {
  Node(uint32_t peers, uint32_t spin) : join(peers, 1, spin), spin(spin) {}
  Shared join;                    // registration, checks, finish: slots are the local peer ids
  uint32_t spin;
  std::unique_ptr<Shared> sweep;  // the members' sweep; null where no local peer is a member
};

bool member_of(const Options& o, uint32_t global_id) {
  return o.group.empty() || std::find(o.group.begin(), o.group.end(), global_id) != o.group.end();
}

// Local peer `id` of this node process. Peer 0 registers first (that call waits for every node);
// the others register once it succeeded, so that a node that cannot join fails once, not once per
// peer. `o` is the command line (o.peers: this node's peers). Local peers outside --group register
// and finish; the group's ops do not involve them.
void node_peer_main(uint32_t id, Runtime& rt, const Config& cfg, const Options& o,
                    const std::vector<std::size_t>& sizes, Node& node) {
  Shared& js = node.join;
  auto fail = [&](Shared& sh, uint32_t slot, const std::string& what) {
    if (sh.errors[slot].empty()) sh.errors[slot] = what;
    sh.failed.store(true, std::memory_order_relaxed);
  };
  std::optional<Peer> peer;
  auto join = [&] {
    auto reg = rt.register_peer(id, cfg);
    if (!reg) fail(js, id, "register with the orchestrator at " + o.orchestrator + ": " + reg.status().to_string());
    else peer = *reg;
  };
  if (id == 0) join();
  // The launcher names node processes by node id (their order of arrival at the orchestrator):
  // it reads each one's id from the pipe it gave it (node_launcher.cpp).
  if (id == 0 && peer)
    if (const char* fd = std::getenv("CHORUS_BENCH_NODE_ID_FD")) {
      const std::string line = std::to_string(peer->node()) + "\n";
      [[maybe_unused]] auto n = ::write(std::atoi(fd), line.data(), line.size());
    }
  js.sync.arrive_and_wait();
  if (id != 0 && !js.failed.load()) join();
  js.sync.arrive_and_wait();

  Options so = o;  // the sweep's participants: every peer of every node, or the group's members
  if (!js.failed.load()) {
    const uint32_t world = peer->size();
    so.peers = o.group.empty() ? world : static_cast<uint32_t>(o.group.size());
    if (is_rooted(o.op) && o.root >= so.peers)
      fail(js, id, "--root " + std::to_string(o.root) + " is not a rank: the sweep has " + std::to_string(so.peers) +
                       " peers (ranks 0.." + std::to_string(so.peers - 1) + ")");
    if (o.op == BenchOp::send_recv && so.peers < 2) fail(js, id, "--op send_recv needs 2 or more peers in the sweep");
    if (id == 0 && !js.failed.load()) {
      // This node's members, by global id; the sweep's rank 0 prints.
      const uint32_t offset = peer->id();
      std::vector<uint32_t> ids;
      for (uint32_t s = 0; s < o.peers; ++s)
        if (member_of(o, offset + s)) ids.push_back(offset + s);
      const uint32_t first = o.group.empty() ? 0 : o.group[0];
      const bool prints = first >= offset && first < offset + o.peers;
      if (!ids.empty()) {
        node.sweep = std::make_unique<Shared>(static_cast<uint32_t>(ids.size()), o.iters, node.spin);
        node.sweep->ids = ids;
        node.sweep->prints = prints;
      }
      if (prints) {
        NodesInfo info;
        info.nodes = o.nodes;
        info.total_peers = world;
        info.local_peers = o.peers;
        info.orchestrator = o.orchestrator;
        print_preamble(o, std::max(1u, std::thread::hardware_concurrency()), &info);
        print_header();
      }
    }
  }
  js.sync.arrive_and_wait();
  if (js.failed.load()) {
    if (id == 0) collect_errors(js, [](uint32_t s) { return "local peer " + std::to_string(s); });
    if (peer) (void)peer->finish();
    return;
  }
  auto leave = [&] {
    if (Status s = peer->finish(); !s) js.finish_errors[id] = "finish: " + s.to_string();
  };
  if (!member_of(o, peer->id())) return leave();

  Shared& sh = *node.sweep;
  const uint32_t slot = static_cast<uint32_t>(std::find(sh.ids.begin(), sh.ids.end(), peer->id()) - sh.ids.begin());
  std::optional<Peer> group;  // the sweep runs inside this subgroup under --group
  if (!o.group.empty()) {
    auto g = peer->new_group(o.group);
    if (!g) fail(sh, slot, "new_group: " + g.status().to_string());
    else group = *g;
  }
  sh.sync.arrive_and_wait();
  if (sh.failed.load()) {
    if (slot == 0) collect_errors(sh, [&](uint32_t s) { return "peer " + std::to_string(sh.ids[s]); });
    return leave();
  }
  Peer& runs = group ? *group : *peer;
  run_sweep(slot, runs.rank(), runs, so, sizes, sh, true);
  // A finish error after a clean run is itself a failure worth reporting.
  if (group)
    if (Status s = group->destroy(); !s && !sh.failed.load()) js.finish_errors[id] = "destroy: " + s.to_string();
  if (sh.failed.load()) (void)peer->finish();
  else leave();
}

} // namespace

int run_node(const Options& o, const std::vector<std::size_t>& sizes) {
  Config cfg;
  cfg.num_devices = o.peers;
  cfg.with_local_strategy(o.strategy);
  cfg.with_global_strategy(o.strategy);
  cfg.timeout = std::chrono::milliseconds(o.timeout_ms);
  cfg.num_nodes = o.nodes;
  cfg.orchestrator_address = o.orchestrator;
  cfg.node_address = o.node_address;
  cfg.secret = o.secret;
  cfg.host_transport = o.transport;
  cfg.tls_certificate = o.tls_cert;  // the nodes' own --tls-* flags (the launcher passes its own on)
  cfg.tls_key = o.tls_key;
  cfg.tls_ca = o.tls_ca;
  cfg.seal_data = o.seal_data;
  if (cfg.secret.empty())
    if (const char* env = std::getenv("CHORUS_SECRET")) cfg.secret = env;
  if (Status s = cfg.validate(); !s) {
    std::fprintf(stderr, "chorus-bench: error: configuration: %s\n", s.to_string().c_str());
    return 2;
  }
  // This node's share of the buffers (the layout is the one of every peer of the sweep).
  const uint32_t total = o.participants();
  const std::size_t all = host_bytes(o.op, o.dtype, total, layout_for(o.op, o.dtype, total, sizes.back()));
  const std::string whose = std::to_string(o.peers) + " peers of this node";
  if (!fits_in_memory(o, all / total * std::min(o.peers, total), whose.c_str())) return 2;

  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  Node node(o.peers, total <= hw ? 4000u : 0u);
  {
    Runtime rt;
    std::vector<std::thread> threads;
    threads.reserve(o.peers);
    for (uint32_t p = 0; p < o.peers; ++p)
      threads.emplace_back([&, p] { node_peer_main(p, rt, cfg, o, sizes, node); });
    for (auto& t : threads) t.join();
  }
  std::vector<std::string> errors = node.join.all_errors;
  if (node.sweep) errors.insert(errors.end(), node.sweep->all_errors.begin(), node.sweep->all_errors.end());
  for (uint32_t p = 0; p < o.peers; ++p)
    if (!node.join.finish_errors[p].empty())
      errors.push_back("local peer " + std::to_string(p) + ": " + node.join.finish_errors[p]);
  // In the sweep every member learns the total #wrong of every node, so their exit statuses agree.
  const Shared* sh = node.sweep.get();
  const std::size_t wrong = sh ? sh->wrong_total : 0;
  if (sh && sh->prints) print_summary(wrong, sh->rows ? sh->busbw_sum / static_cast<double>(sh->rows) : 0.0);
  for (const auto& e : errors) std::fprintf(stderr, "chorus-bench: error: %s\n", e.c_str());
  if (!errors.empty()) return 1;
  return wrong ? 1 : 0;
}

} // namespace chorus::bench
