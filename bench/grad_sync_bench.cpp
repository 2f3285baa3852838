// chorus-gradsync-bench: a model-shaped gradient sync workload over the in-process runtime.
// ~100 f32 parameters of sizes log-uniform in [10 KiB, 16 MiB] (fixed seed; --scale N divides every
// size by N for a quick run), P peers (threads), each step submits every gradient then sync()s.
//  1. fused (bucket_bytes = 25 MiB / scale) vs unfused (bucket_bytes = 0): time per step, no compute.
//  2. sync added to a step with a simulated backward pass (fixed busy work per parameter,
//     proportional to its size, --compute-ms in total per peer): "overlapped" submits each gradient
//     right after its compute; "after" computes everything first, then submits and syncs.
//     added = step time - compute-only step time.
// Every step's result is checked (sum of the peers' constant gradients). Times: median over steps
// of peer 0's wall time between two barriers.
//
// Usage: chorus-gradsync-bench [--scale N] [--steps N] [--peers N] [--params N] [--compute-ms N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <chorus/chorus.hpp>
#include <chorus/grad_sync.hpp>

using namespace chorus;
using Clock = std::chrono::steady_clock;

namespace {

struct Opts {
  std::size_t scale = 1;
  int steps = 5;
  uint32_t peers = 4;
  int params = 100;
  double compute_ms = 200;
};

volatile float g_sink;

// Busy work that does not depend on the clock: `iters` dependent multiply-adds.
void busy(std::size_t iters) {
  float a = 1.0f, b = 0.999999f;
  for (std::size_t i = 0; i < iters; ++i) a = a * b + 1e-7f;
  g_sink = a;
}

std::size_t calibrate_iters_per_ms() {
  const std::size_t probe = 20'000'000;
  auto t0 = Clock::now();
  busy(probe);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return static_cast<std::size_t>(probe / std::max(ms, 1e-3));
}

enum class Mode { none, overlapped, after, compute_only };

// Runs `steps` steps (plus one warm-up) and returns the median step time in ms, or -1 on error.
double run(const Opts& o, const std::vector<ParamSpec>& specs, std::size_t bucket_bytes, Mode mode,
           const std::vector<std::size_t>& work, std::size_t* nbuckets) {
  Runtime rt;
  Config cfg;
  cfg.num_devices = o.peers;
  cfg.timeout = std::chrono::milliseconds(60000);
  std::vector<double> times;
  bool ok = true;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (uint32_t p = 0; p < o.peers; ++p)
    threads.emplace_back([&, p] {
      auto fail = [&](const std::string& what) {
        std::lock_guard lk(mu);
        if (ok) std::fprintf(stderr, "peer %u: %s\n", p, what.c_str());
        ok = false;
      };
      auto peer = rt.register_peer(p, cfg);
      if (!peer) return fail(peer.status().to_string());
      GradSyncOptions go;
      go.bucket_bytes = bucket_bytes;
      go.op = ReduceOp::sum;
      go.timeout = cfg.timeout;
      GradientSync gs(*peer, go);
      if (mode != Mode::compute_only) {
        if (Status s = gs.register_params(specs); !s) return fail(s.to_string());
        if (p == 0 && nbuckets) *nbuckets = gs.buckets().size();
      }
      std::vector<Tensor> grads;
      for (const auto& sp : specs) grads.push_back(Tensor::zeros(DType::f32, {int64_t(sp.numel)}));
      const float expect = static_cast<float>(o.peers * (o.peers + 1) / 2);
      for (int step = 0; step <= o.steps; ++step) {
        for (auto& g : grads) std::fill_n(g.data_as<float>(), g.numel(), float(p + 1));
        if (Status s = peer->barrier(); !s) return fail(s.to_string());
        auto t0 = Clock::now();
        if (mode == Mode::after || mode == Mode::compute_only)
          for (std::size_t i = 0; i < specs.size(); ++i) busy(work[i]);
        if (mode != Mode::compute_only) {
          for (std::size_t i = 0; i < specs.size(); ++i) {
            if (mode == Mode::overlapped) busy(work[i]);
            if (Status s = gs.submit(specs[i].id, grads[i]); !s) return fail(s.to_string());
          }
          if (Status s = gs.sync(); !s) return fail(s.to_string());
        }
        if (Status s = peer->barrier(); !s) return fail(s.to_string());
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (mode != Mode::compute_only)
          for (auto& g : grads) {
            const float* d = g.data_as<float>();
            if (d[0] != expect || d[g.numel() - 1] != expect || d[g.numel() / 2] != expect)
              return fail("wrong result");
          }
        if (p == 0 && step > 0) times.push_back(ms);
      }
      if (Status s = peer->finish(); !s) return fail(s.to_string());
    });
  for (auto& t : threads) t.join();
  if (!ok || times.empty()) return -1;
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  const char* usage =
      "usage: chorus-gradsync-bench [--scale N] [--steps N] [--peers N] [--params N] [--compute-ms MS]\n"
      "  A model-shaped gradient sync: --params f32 parameters (default 100) of 10 KiB..16 MiB\n"
      "  (log-uniform), each size and the 25 MiB fusion threshold divided by --scale; --peers\n"
      "  devices (default 4); median step time over --steps steps; --compute-ms of simulated\n"
      "  backward compute per step, spread between the gradient submissions.\n";
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h" || (i + 1 == argc && (i % 2) == 1)) {
      std::fputs(usage, std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h" ? stdout : stderr);
      return std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h" ? 0 : 2;
    }
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    const char* v = argv[i + 1];
    if (a == "--scale") o.scale = std::max<long>(1, std::atol(v));
    else if (a == "--steps") o.steps = std::max(1, std::atoi(v));
    else if (a == "--peers") o.peers = std::max(1, std::atoi(v));
    else if (a == "--params") o.params = std::max(1, std::atoi(v));
    else if (a == "--compute-ms") o.compute_ms = std::atof(v);
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  // Model: sizes log-uniform in [10 KiB, 16 MiB], f32.
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(std::log(10.0 * 1024), std::log(16.0 * 1024 * 1024));
  std::vector<ParamSpec> specs;
  std::size_t total = 0;
  for (int i = 0; i < o.params; ++i) {
    std::size_t bytes = static_cast<std::size_t>(std::exp(u(rng))) / o.scale;
    std::size_t numel = std::max<std::size_t>(1, bytes / 4);
    specs.push_back({uint64_t(i), DType::f32, numel, 1});
    total += numel * 4;
  }
  const std::size_t ipm = calibrate_iters_per_ms();
  std::vector<std::size_t> work;
  for (const auto& s : specs)
    work.push_back(static_cast<std::size_t>(o.compute_ms * ipm * double(s.numel * 4) / double(total)));

  std::printf("chorus-gradsync-bench: %d params, %.1f MiB of f32 gradients per peer, %u peers, "
              "%d steps (median), %u cores\n",
              o.params, total / 1048576.0, o.peers, o.steps, std::thread::hardware_concurrency());
  // The fusion threshold scales with the sizes, so a scaled-down run keeps the bucket structure.
  const std::size_t thr = (25u << 20) / o.scale;
  std::size_t nb_fused = 0, nb_unfused = 0;
  const double fused = run(o, specs, thr, Mode::none, work, &nb_fused);
  const double unfused = run(o, specs, 0, Mode::none, work, &nb_unfused);
  const double compute = run(o, specs, thr, Mode::compute_only, work, nullptr);
  const double over = run(o, specs, thr, Mode::overlapped, work, nullptr);
  const double after = run(o, specs, thr, Mode::after, work, nullptr);
  if (fused < 0 || unfused < 0 || compute < 0 || over < 0 || after < 0) return 1;
  std::printf("\n| workload                         | buckets | step ms | sync added ms |\n");
  std::printf("|----------------------------------|--------:|--------:|--------------:|\n");
  std::printf("| sync only, fused (25 MiB/scale)  | %7zu | %7.1f | %13.1f |\n", nb_fused, fused, fused);
  std::printf("| sync only, unfused (0)           | %7zu | %7.1f | %13.1f |\n", nb_unfused, unfused, unfused);
  std::printf("| backward only (no sync)          | %7s | %7.1f | %13s |\n", "-", compute, "-");
  std::printf("| backward + sync overlapped       | %7zu | %7.1f | %13.1f |\n", nb_fused, over, over - compute);
  std::printf("| backward, then sync after it     | %7zu | %7.1f | %13.1f |\n", nb_fused, after, after - compute);
  return 0;
}
