// chorus-bench: nccl-tests style benchmark of the chorus collectives on the CPU, one thread per
// peer on one in-process Runtime, or (--nodes) one process per node joined through
// chorus-orchestrator. See --help (bench/options.cpp) for the flags and columns.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <chorus/chorus.hpp>
#include "cuda/gpu.hpp"
#include "node_launcher.hpp"
#include "op_runner.hpp"
#include "options.hpp"
#include "report.hpp"
#include "spin_barrier.hpp"

using namespace chorus;
using namespace chorus::bench;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<std::size_t> sweep(const Options& o) {
  if (o.op == BenchOp::barrier) return {0};
  std::vector<std::size_t> sizes;
  for (std::size_t s = o.min_bytes; s <= o.max_bytes;) {
    sizes.push_back(s);
    if (s == 0) { s = 1; continue; }
    if (s > o.max_bytes / o.factor) break;
    s *= o.factor;
  }
  return sizes;
}

double median(std::vector<double>& v) {
  if (v.empty()) return 0;
  const std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) m = (m + *std::max_element(v.begin(), v.begin() + mid)) / 2;
  return m;
}

// What the peer threads of this process share. Each slot is written by its own peer and read by
// slot 0 (or main) only after a barrier. Slots are the local peers taking part in the sweep: the
// sweep ranks in local mode, the local peer ids in multi-node mode.
struct Shared {
  Shared(uint32_t slots, int iters, uint32_t spin)
      : sync(slots, spin), elapsed(slots), wrong(slots), errors(slots), finish_errors(slots), iter_us(iters) {}
  SpinBarrier sync;
  std::vector<double> elapsed;        // seconds for the timed loop, per peer
  std::vector<std::size_t> wrong;     // wrong elements of the checked call, per peer
  std::vector<std::string> errors;    // first error of the current size, per peer
  std::vector<std::string> finish_errors;  // per peer, from finish() after the sweep
  std::vector<double> iter_us;        // rank 0: each timed iteration, us
  std::atomic<bool> failed{false};
  // Slot 0 prints the rows: always in local mode; in multi-node mode when it is global rank 0.
  bool prints = true;
  // Results (slot 0 writes them, main reads them after join). In multi-node mode wrong_total is
  // the total over every node (each node learns it), so every node's exit status agrees.
  std::size_t wrong_total = 0;
  double busbw_sum = 0;
  std::size_t rows = 0;
  std::vector<std::string> all_errors;
  // What ran the current size's op, as the library reports it to rank 0 (Peer::last_strategy).
  std::string strategy;
};

// --device cuda: GPU 0's device-to-device copy bandwidth (GB/s), measured once before the sweep.
double g_copy_gbps = 0;

// The memory-bound ideal of an all_reduce among n logical peers of one GPU: every input read once
// and every output written once, n x bytes each way, i.e. as long as copying n x bytes.
std::optional<double> ideal_us(const Options& o, std::size_t bytes) {
  if (o.device != DeviceType::cuda || o.gpus != 1 || o.op != BenchOp::all_reduce || g_copy_gbps <= 0) return std::nullopt;
  return static_cast<double>(o.participants()) * static_cast<double>(bytes) / (g_copy_gbps * 1e3);
}

// Slot 0 moves the errors of the current size into all_errors (after a barrier). `name` names a
// slot's peer in the messages.
template <class Name>
void collect_errors(Shared& sh, Name name) {
  for (uint32_t p = 0; p < sh.errors.size(); ++p)
    if (!sh.errors[p].empty()) {
      sh.all_errors.push_back(name(p) + ": " + sh.errors[p]);
      sh.errors[p].clear();
    }
}

// The sweep of one registered peer. `o` describes the sweep's participants (o.peers: the group's
// size under --group, every peer of every node in multi-node mode); `slot` indexes this peer's
// entries in `sh`, `rank` is its rank among the participants. In multi-node mode the row's time
// (max over every peer) and #wrong (sum) come from all_reduce calls of the library itself,
// outside the timed region, and every timed loop starts after a library barrier.
void run_sweep(uint32_t slot, uint32_t rank, Peer& peer, const Options& o,
               const std::vector<std::size_t>& sizes, Shared& sh, bool multi) {
  auto fail = [&](const std::string& what) {
    if (sh.errors[slot].empty()) sh.errors[slot] = what;
    sh.failed.store(true, std::memory_order_relaxed);
  };
  OpRunner runner(o, peer, rank);
  const std::string type(to_string(o.dtype));
  const std::string redop = uses_redop(o.op) ? std::string(to_string(o.redop)) : "none";
  const long root = is_rooted(o.op) ? static_cast<long>(o.root) : -1;
  const double factor = bus_factor(o.op, o.peers);

  // One library call; false once this peer (or any local peer) has failed: later calls are
  // skipped so a failure costs at most one timeout (per node).
  auto call_lib = [&](const char* what, auto&& op) -> bool {
    if (sh.failed.load(std::memory_order_relaxed)) return false;
    Status s = op();
    if (!s) {
      fail(what[0] ? std::string(what) + ": " + s.to_string() : s.to_string());
      return false;
    }
    return true;
  };
  auto call = [&]() -> bool { return call_lib("", [&] { return runner.run(); }); };
  auto name = [&](uint32_t s) { return "peer " + std::to_string(multi ? rank - slot + s : s); };

  for (std::size_t size : sizes) {
    const Layout layout = layout_for(o.op, o.dtype, o.peers, size);
    try {
      runner.prepare(layout);
    } catch (const std::exception& e) {
      fail(std::string("allocating buffers: ") + e.what());
    }
    sh.sync.arrive_and_wait();
    for (int w = 0; w < o.warmup; ++w)
      if (!call()) break;
    sh.sync.arrive_and_wait();
    // Across processes the local barrier is not enough: every peer of every node starts together.
    if (multi) call_lib("barrier before the timed loop", [&] { return peer.barrier(); });

    // Timed loop: all peers leave the barrier together; allocation- and print-free.
    const auto t0 = Clock::now();
    auto last = t0;
    for (int it = 0; it < o.iters; ++it) {
      if (!call()) break;
      if (rank == 0) {
        const auto now = Clock::now();
        sh.iter_us[it] = std::chrono::duration<double, std::micro>(now - last).count();
        last = now;
      }
    }
    sh.elapsed[slot] = std::chrono::duration<double>(Clock::now() - t0).count();
    if (rank == 0) sh.strategy = peer.last_strategy();
    sh.sync.arrive_and_wait();

    sh.wrong[slot] = 0;
    if (o.check && !sh.failed.load()) {
      try {
        runner.reset_for_check();
        if (call()) sh.wrong[slot] = runner.count_wrong();
      } catch (const std::exception& e) {  // GPU copies of the checked call
        fail(std::string("checking results: ") + e.what());
      }
    }
    sh.sync.arrive_and_wait();

    double time_s = 0;
    std::size_t wrong = 0;
    if (multi) {
      // Every peer contributes its own values; every peer gets the totals.
      Tensor t = Tensor::zeros(DType::f64, {1});
      Tensor w = Tensor::zeros(DType::i64, {1});
      *static_cast<double*>(t.data()) = sh.elapsed[slot];
      *static_cast<int64_t*>(w.data()) = static_cast<int64_t>(sh.wrong[slot]);
      if (call_lib("all_reduce(max) of the row's times", [&] { return peer.all_reduce(t, ReduceOp::max); }) &&
          call_lib("all_reduce(sum) of the row's #wrong", [&] { return peer.all_reduce(w, ReduceOp::sum); })) {
        time_s = *static_cast<const double*>(t.data());
        wrong = static_cast<std::size_t>(*static_cast<const int64_t*>(w.data()));
      }
      sh.sync.arrive_and_wait();
    } else if (slot == 0) {
      time_s = *std::max_element(sh.elapsed.begin(), sh.elapsed.end());
      for (auto x : sh.wrong) wrong += x;
    }

    if (slot == 0) {
      if (sh.failed.load()) {
        if (sh.prints) print_failed_row(layout.bytes, layout.count, type, redop, root);
        collect_errors(sh, name);
      } else {
        Row r;
        r.bytes = layout.bytes;
        r.count = layout.count;
        r.type = type;
        r.redop = redop;
        r.root = root;
        r.time_us = time_s * 1e6 / o.iters;
        r.algbw = o.op == BenchOp::barrier ? 0.0 : alg_bandwidth(layout.bytes, r.time_us);
        r.busbw = r.algbw * factor;
        if (o.check) r.wrong = wrong;
        if (sh.prints) {
          r.median_us = median(sh.iter_us);
          r.strategy = sh.strategy;
          r.ideal_us = ideal_us(o, layout.bytes);
          print_row(r);
        }
        sh.wrong_total += wrong;
        sh.busbw_sum += r.busbw;
        sh.rows += 1;
      }
    }
    // Slot 0 reads the shared slots above; nobody writes them again before the next size's first
    // barrier, which slot 0 passes only after printing. The failure flag is stable here.
    if (sh.failed.load()) break;
  }
  runner.release();
}

// Local mode: `o` describes the sweep's participants (o.peers is the group's size under --group);
// `id` is this peer's global id, `rank` its index among the participants (and its slot).
void peer_main(uint32_t rank, uint32_t id, Runtime& rt, const Config& cfg, const Options& o,
               const std::vector<std::size_t>& sizes, Shared& sh) {
  auto fail = [&](const std::string& what) {
    if (sh.errors[rank].empty()) sh.errors[rank] = what;
    sh.failed.store(true, std::memory_order_relaxed);
  };
  auto reg = rt.register_peer(id, cfg);
  if (!reg) fail("register: " + reg.status().to_string());
  std::optional<Peer> group;  // the sweep runs inside this subgroup under --group
  if (reg && !o.group.empty()) {
    auto g = reg->new_group(o.group);
    if (!g) fail("new_group: " + g.status().to_string());
    else group = *g;
  }
  sh.sync.arrive_and_wait();
  const bool registered = reg.is_ok();
  if (sh.failed.load()) {
    if (rank == 0) collect_errors(sh, [](uint32_t s) { return "peer " + std::to_string(s); });
    if (registered) (void)reg->finish();
    return;
  }
  run_sweep(rank, rank, group ? *group : *reg, o, sizes, sh, false);
  // A finish error after a clean run is itself a failure worth reporting (printed by main).
  if (group)
    if (Status s = group->destroy(); !s && !sh.failed.load()) sh.finish_errors[rank] = "destroy: " + s.to_string();
  if (Status s = reg->finish(); !s && !sh.failed.load()) sh.finish_errors[rank] = "finish: " + s.to_string();
}

// Multi-node mode: local peer `id` of this node process. Peer 0 registers first (that call waits
// for every node); the others register once it succeeded, so that a node that cannot join fails
// once, not once per peer. `o` is the command line (o.peers: this node's peers).
void node_peer_main(uint32_t id, Runtime& rt, const Config& cfg, const Options& o,
                    const std::vector<std::size_t>& sizes, Shared& sh) {
  auto fail = [&](const std::string& what) {
    if (sh.errors[id].empty()) sh.errors[id] = what;
    sh.failed.store(true, std::memory_order_relaxed);
  };
  std::optional<Peer> peer;
  auto join = [&] {
    auto reg = rt.register_peer(id, cfg);
    if (!reg) fail("register with the orchestrator at " + o.orchestrator + ": " + reg.status().to_string());
    else peer = *reg;
  };
  if (id == 0) join();
  sh.sync.arrive_and_wait();
  if (id != 0 && !sh.failed.load()) join();
  sh.sync.arrive_and_wait();

  Options so = o;  // the sweep's participants: every peer of every node
  if (!sh.failed.load()) {
    so.peers = peer->size();
    if (is_rooted(o.op) && o.root >= so.peers)
      fail("--root " + std::to_string(o.root) + " is not a rank: the nodes have " + std::to_string(so.peers) +
           " peers in all (ranks 0.." + std::to_string(so.peers - 1) + ")");
    if (o.op == BenchOp::send_recv && so.peers < 2) fail("--op send_recv needs 2 or more peers in all");
  }
  sh.sync.arrive_and_wait();
  if (sh.failed.load()) {
    if (id == 0) {
      sh.prints = false;
      collect_errors(sh, [](uint32_t s) { return "local peer " + std::to_string(s); });
    }
    if (peer) (void)peer->finish();
    return;
  }
  const uint32_t rank = peer->rank();
  if (id == 0) {
    sh.prints = rank == 0;
    if (sh.prints) {
      NodesInfo info;
      info.nodes = o.nodes;
      info.total_peers = so.peers;
      info.local_peers = o.peers;
      info.orchestrator = o.orchestrator;
      print_preamble(o, std::max(1u, std::thread::hardware_concurrency()), &info);
      print_header();
    }
  }
  run_sweep(id, rank, *peer, so, sizes, sh, true);
  if (Status s = peer->finish(); !s && !sh.failed.load()) sh.finish_errors[id] = "finish: " + s.to_string();
}

// Refuses sweeps whose buffers cannot fit in memory instead of dying half way. `need`: the bytes
// this machine would hold.
bool fits_in_memory(const Options& o, std::size_t need, const char* whose) {
  const double phys = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  if (phys > 0 && static_cast<double>(need) > 0.75 * phys) {
    std::fprintf(stderr,
                 "chorus-bench: error: -e %zu needs %.1f GiB of buffers for %s, more than 75%% of "
                 "this machine's %.1f GiB\n",
                 o.max_bytes, static_cast<double>(need) / (1 << 30), whose, phys / (1 << 30));
    return false;
  }
  return true;
}

// One node of a multi-node collective (joined through --orchestrator).
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
  cfg.tls_certificate = o.tls_cert;  // the nodes' own --tls-* flags (the launcher passes its own on)
  cfg.tls_key = o.tls_key;
  cfg.tls_ca = o.tls_ca;
  if (cfg.secret.empty())
    if (const char* env = std::getenv("CHORUS_SECRET")) cfg.secret = env;
  if (Status s = cfg.validate(); !s) {
    std::fprintf(stderr, "chorus-bench: error: configuration: %s\n", s.to_string().c_str());
    return 2;
  }
  // This node's share of the buffers (the layout is the one of every peer of every node).
  const uint32_t total = o.participants();
  const std::size_t all = host_bytes(o.op, o.dtype, total, layout_for(o.op, o.dtype, total, sizes.back()));
  const std::string whose = std::to_string(o.peers) + " peers of this node";
  if (!fits_in_memory(o, all / total * o.peers, whose.c_str())) return 2;

  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  Shared sh(o.peers, o.iters, total <= hw ? 4000u : 0u);
  {
    Runtime rt;
    std::vector<std::thread> threads;
    threads.reserve(o.peers);
    for (uint32_t p = 0; p < o.peers; ++p)
      threads.emplace_back([&, p] { node_peer_main(p, rt, cfg, o, sizes, sh); });
    for (auto& t : threads) t.join();
  }
  for (uint32_t p = 0; p < o.peers; ++p)
    if (!sh.finish_errors[p].empty())
      sh.all_errors.push_back("local peer " + std::to_string(p) + ": " + sh.finish_errors[p]);
  if (sh.prints) print_summary(sh.wrong_total, sh.rows ? sh.busbw_sum / static_cast<double>(sh.rows) : 0.0);
  for (const auto& e : sh.all_errors) std::fprintf(stderr, "chorus-bench: error: %s\n", e.c_str());
  if (!sh.all_errors.empty()) return 1;
  return sh.wrong_total ? 1 : 0;
}

} // namespace

int main(int argc, char** argv) {
  const ParseResult pr = parse_options(argc, argv);
  if (pr.kind == ParseResult::Kind::help) {
    std::fputs(usage("chorus-bench").c_str(), stdout);
    return 0;
  }
  if (pr.kind == ParseResult::Kind::error) {
    std::fprintf(stderr, "chorus-bench: error: %s\n(chorus-bench --help lists every flag)\n", pr.error.c_str());
    return 2;
  }
  const Options& o = pr.options;
  if (o.device == DeviceType::cuda && gpu::device_count() < static_cast<int>(o.gpus)) {
    std::fprintf(stderr, "chorus-bench: --device cuda: needs %u CUDA device(s), this machine has %d%s\n", o.gpus,
                 gpu::device_count(), gpu::built_with_cuda() ? "" : " (chorus was built without CUDA)");
    return 2;
  }
  const std::vector<std::size_t> sizes = sweep(o);
  if (o.multi_node() && !o.launcher()) return run_node(o, sizes);

  Config cfg;
  cfg.num_devices = o.peers;
  cfg.with_local_strategy(o.strategy);
  cfg.timeout = std::chrono::milliseconds(o.timeout_ms);
  if (Status s = cfg.validate(); !s) {
    std::fprintf(stderr, "chorus-bench: error: configuration: %s\n", s.to_string().c_str());
    return 2;
  }

  if (o.launcher()) {
    // Every node process runs on this machine.
    const uint32_t total = o.participants();
    const std::size_t need = host_bytes(o.op, o.dtype, total, layout_for(o.op, o.dtype, total, sizes.back()));
    const std::string whose = std::to_string(total) + " peers (" + std::to_string(o.nodes) + " nodes x " +
                              std::to_string(o.peers) + ")";
    if (!fits_in_memory(o, need, whose.c_str())) return 2;
    return launch(argc, argv, o, sizes);
  }

  const std::size_t need = host_bytes(o.op, o.dtype, o.peers, layout_for(o.op, o.dtype, o.peers, sizes.back()));
  if (!fits_in_memory(o, need, (std::to_string(o.peers) + " peers").c_str())) return 2;

  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  print_preamble(o, hw);
  if (o.device == DeviceType::cuda) {
    std::vector<std::string> names;
    for (uint32_t g = 0; g < o.gpus; ++g) names.push_back(gpu::device_name(static_cast<int>(g)));
    if (std::string e = gpu::copy_bandwidth(0, std::size_t{256} << 20, g_copy_gbps); !e.empty())
      std::printf("#  (copy bandwidth not measured: %s)\n", e.c_str());
    print_devices(names, g_copy_gbps);
  }
  print_header();

  // Spin in the barrier only when every peer has a hardware thread of its own.
  Options sweep_opts = o;
  sweep_opts.peers = o.participants();
  Shared sh(sweep_opts.peers, o.iters, o.peers <= hw ? 4000u : 0u);
  {
    Runtime rt;
    std::vector<std::thread> threads;
    threads.reserve(o.peers);
    for (uint32_t p = 0; p < o.peers; ++p) {
      auto pos = std::find(o.group.begin(), o.group.end(), p);
      if (!o.group.empty() && pos == o.group.end()) {
        // Not in the group: join the collective, then leave; the group's ops do not involve it.
        threads.emplace_back([&, p] {
          auto reg = rt.register_peer(p, cfg);
          if (reg) (void)reg->finish();
        });
        continue;
      }
      const uint32_t rank = o.group.empty() ? p : static_cast<uint32_t>(pos - o.group.begin());
      threads.emplace_back([&, p, rank] { peer_main(rank, p, rt, cfg, sweep_opts, sizes, sh); });
    }
    for (auto& t : threads) t.join();
  }
  // Errors raised after the last row (finish) are not in all_errors yet.
  for (uint32_t p = 0; p < sweep_opts.peers; ++p)
    if (!sh.finish_errors[p].empty()) sh.all_errors.push_back("peer " + std::to_string(p) + ": " + sh.finish_errors[p]);

  print_summary(sh.wrong_total, sh.rows ? sh.busbw_sum / static_cast<double>(sh.rows) : 0.0);
  for (const auto& e : sh.all_errors) std::fprintf(stderr, "chorus-bench: error: %s\n", e.c_str());
  if (!sh.all_errors.empty()) return 1;
  return sh.wrong_total ? 1 : 0;
}
