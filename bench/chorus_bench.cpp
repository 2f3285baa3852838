// chorus-bench: nccl-tests style benchmark of the chorus collectives on the CPU, one thread per
// peer on one in-process Runtime. See --help (bench/options.cpp) for the flags and columns.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/chorus.hpp"
#include "bench/op_runner.hpp"
#include "bench/options.hpp"
#include "bench/report.hpp"
#include "bench/spin_barrier.hpp"

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

// What the peer threads share. Each slot is written by its own peer and read by peer 0 (or main)
// only after a barrier.
struct Shared {
  explicit Shared(const Options& o, uint32_t spin)
      : sync(o.peers, spin), elapsed(o.peers), wrong(o.peers), errors(o.peers), finish_errors(o.peers), iter_us(o.iters) {}
  SpinBarrier sync;
  std::vector<double> elapsed;        // seconds for the timed loop, per peer
  std::vector<std::size_t> wrong;     // wrong elements of the checked call, per peer
  std::vector<std::string> errors;    // first error of the current size, per peer
  std::vector<std::string> finish_errors;  // per peer, from finish() after the sweep
  std::vector<double> iter_us;        // peer 0: each timed iteration, us
  std::atomic<bool> failed{false};
  // Results (peer 0 writes them, main reads them after join).
  std::size_t wrong_total = 0;
  double busbw_sum = 0;
  std::size_t rows = 0;
  std::vector<std::string> all_errors;
};

// `o` describes the sweep's participants (o.peers is the group's size under --group); `id` is this
// peer's global id, `rank` its index among the participants.
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
    if (rank == 0)
      for (uint32_t p = 0; p < o.peers; ++p)
        if (!sh.errors[p].empty()) sh.all_errors.push_back("peer " + std::to_string(p) + ": " + sh.errors[p]);
    if (registered) (void)reg->finish();
    return;
  }
  Peer& peer = group ? *group : *reg;
  OpRunner runner(o, peer, rank);
  const std::string type(to_string(o.dtype));
  const std::string redop = uses_redop(o.op) ? std::string(to_string(o.redop)) : "none";
  const long root = is_rooted(o.op) ? static_cast<long>(o.root) : -1;
  const double factor = bus_factor(o.op, o.peers);

  // One op call; false once this peer (or any peer) has failed: later calls are skipped so a
  // failure costs at most one timeout.
  auto call = [&]() -> bool {
    if (sh.failed.load(std::memory_order_relaxed)) return false;
    Status s = runner.run();
    if (!s) {
      fail(s.to_string());
      return false;
    }
    return true;
  };

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
    sh.elapsed[rank] = std::chrono::duration<double>(Clock::now() - t0).count();
    sh.sync.arrive_and_wait();

    sh.wrong[rank] = 0;
    if (o.check && !sh.failed.load()) {
      runner.reset_for_check();
      if (call()) sh.wrong[rank] = runner.count_wrong();
    }
    sh.sync.arrive_and_wait();

    if (rank == 0) {
      if (sh.failed.load()) {
        print_failed_row(layout.bytes, layout.count, type, redop, root);
        for (uint32_t p = 0; p < o.peers; ++p)
          if (!sh.errors[p].empty()) sh.all_errors.push_back("peer " + std::to_string(p) + ": " + sh.errors[p]);
      } else {
        Row r;
        r.bytes = layout.bytes;
        r.count = layout.count;
        r.type = type;
        r.redop = redop;
        r.root = root;
        r.time_us = *std::max_element(sh.elapsed.begin(), sh.elapsed.end()) * 1e6 / o.iters;
        r.algbw = o.op == BenchOp::barrier ? 0.0 : alg_bandwidth(layout.bytes, r.time_us);
        r.busbw = r.algbw * factor;
        std::size_t wrong = 0;
        for (auto w : sh.wrong) wrong += w;
        if (o.check) r.wrong = wrong;
        r.median_us = median(sh.iter_us);
        r.strategy = resolved_strategy(o, cfg, layout);
        print_row(r);
        sh.wrong_total += wrong;
        sh.busbw_sum += r.busbw;
        sh.rows += 1;
      }
    }
    // Peer 0 reads the shared slots above; nobody writes them again before the next size's first
    // barrier, which peer 0 passes only after printing. The failure flag is stable here.
    if (sh.failed.load()) break;
  }
  runner.release();
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
  if (o.device == Device::cuda) {
    std::fprintf(stderr, "chorus-bench: --device cuda: the CUDA path is not built yet; use --device cpu\n");
    return 2;
  }

  Config cfg;
  cfg.num_devices = o.peers;
  cfg.with_local_strategy(o.strategy);
  cfg.timeout = std::chrono::milliseconds(o.timeout_ms);
  if (Status s = cfg.validate(); !s) {
    std::fprintf(stderr, "chorus-bench: error: configuration: %s\n", s.to_string().c_str());
    return 2;
  }

  const std::vector<std::size_t> sizes = sweep(o);
  // Refuse sweeps whose buffers cannot fit in memory instead of dying half way.
  const double phys = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  const std::size_t need = host_bytes(o.op, o.dtype, o.peers, layout_for(o.op, o.dtype, o.peers, sizes.back()));
  if (phys > 0 && static_cast<double>(need) > 0.75 * phys) {
    std::fprintf(stderr,
                 "chorus-bench: error: -e %zu needs %.1f GiB of buffers for %u peers, more than 75%% of "
                 "this machine's %.1f GiB\n",
                 o.max_bytes, static_cast<double>(need) / (1 << 30), o.peers, phys / (1 << 30));
    return 2;
  }

  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  print_preamble(o, hw);
  print_header();

  // Spin in the barrier only when every peer has a hardware thread of its own.
  Options sweep_opts = o;
  sweep_opts.peers = o.participants();
  Shared sh(sweep_opts, o.peers <= hw ? 4000u : 0u);
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
