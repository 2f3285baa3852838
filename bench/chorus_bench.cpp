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
#include "explain.hpp"
#include "strategies/plan_rules.hpp"
#include "node_launcher.hpp"
#include "node_run.hpp"
#include "op_runner.hpp"
#include "options.hpp"
#include "report.hpp"
#include "sweep.hpp"

using namespace chorus;
using namespace chorus::bench;

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
  if (o.explain) return explain(o, sizes);
  if (o.rules) return std::fputs(describe_rules().c_str(), stdout) < 0 ? 1 : 0;
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
    if (Result<double> bw = gpu::copy_bandwidth(0, std::size_t{256} << 20); bw.is_ok())
      g_copy_gbps = *bw;
    else
      std::printf("#  (copy bandwidth not measured: %s)\n", bw.status().to_string().c_str());
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
