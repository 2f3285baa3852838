#include "sweep.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>

#include "op_runner.hpp"
#include "report.hpp"
#include "timing.hpp"

namespace chorus::bench {

namespace {


// The memory-bound ideal of an all_reduce among n logical peers of one GPU: every input read once
// and every output written once, n x bytes each way, i.e. as long as copying n x bytes.
std::optional<double> ideal_us(const Options& o, std::size_t bytes) {
  if (o.device != DeviceType::cuda || o.gpus != 1 || o.op != BenchOp::all_reduce || g_copy_gbps <= 0) return std::nullopt;
  return static_cast<double>(o.participants()) * static_cast<double>(bytes) / (g_copy_gbps * 1e3);
}

} // namespace

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
  auto name = [&](uint32_t s) { return "peer " + std::to_string(multi ? sh.ids[s] : s); };

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

} // namespace chorus::bench
