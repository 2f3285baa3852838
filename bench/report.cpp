#include "report.hpp"

#include <cstdio>

namespace chorus::bench {

double bus_factor(BenchOp op, uint32_t peers) {
  const double n = peers;
  switch (op) {
    case BenchOp::all_reduce: return 2.0 * (n - 1) / n;
    case BenchOp::reduce_scatter:
    case BenchOp::all_gather:
    case BenchOp::all_to_all:
    case BenchOp::gather:
    case BenchOp::scatter: return (n - 1) / n;
    case BenchOp::broadcast:
    case BenchOp::reduce:
    case BenchOp::send_recv: return 1.0;
    case BenchOp::barrier: return 0.0;
  }
  return 0.0;
}

double alg_bandwidth(std::size_t bytes, double time_us) {
  return time_us > 0 ? static_cast<double>(bytes) / (time_us * 1e3) : 0.0;
}

void print_preamble(const Options& o, unsigned hardware_threads, const NodesInfo* nodes) {
  std::printf("# chorus-bench: op %s, peers %u, dtype %s, redop %s, strategy %s, device %s\n",
              std::string(to_string(o.op)).c_str(), nodes ? nodes->total_peers : o.peers,
              std::string(to_string(o.dtype)).c_str(),
              uses_redop(o.op) ? std::string(to_string(o.redop)).c_str() : "none",
              o.strategy_text.c_str(), o.device == DeviceType::cuda ? "cuda" : "cpu");
  std::printf("#  minBytes %zu maxBytes %zu step: %zu(factor) warmup iters: %d iters: %d "
              "validation: %d root: %u timeout: %lld ms\n",
              o.min_bytes, o.max_bytes, o.factor, o.warmup, o.iters, o.check ? 1 : 0, o.root,
              static_cast<long long>(o.timeout_ms));
  if (nodes)
    std::printf("#  %u nodes (one process each, one thread per peer; %u peer%s on rank 0's node), "
                "global strategy, orchestrator %s%s; %u hardware threads here\n",
                nodes->nodes, nodes->local_peers, nodes->local_peers == 1 ? "" : "s", nodes->orchestrator.c_str(),
                o.tls() ? ", TLS (control and data)" : "", hardware_threads);
  else
    std::printf("#  one thread per peer on one in-process Runtime; %u hardware threads\n", hardware_threads);
  if (!o.group.empty()) {
    std::printf("#  inside the group of peers");
    for (uint32_t id : o.group) std::printf(" %u", id);
    std::printf(" (ranks 0..%zu; busbw for %zu peers)\n", o.group.size() - 1, o.group.size());
  }
  std::printf("#\n");
}

void print_devices(const std::vector<std::string>& names, double copy_gbps) {
  for (std::size_t g = 0; g < names.size(); ++g) std::printf("#  GPU %zu: %s\n", g, names[g].c_str());
  if (copy_gbps > 0)
    std::printf("#  GPU 0 device-to-device copy bandwidth: %.1f GB/s (cudaMemcpyAsync of 256 MiB); the\n"
                "#  ideal column of all_reduce is peers x size / that bandwidth (each input read once,\n"
                "#  each output written once)\n",
                copy_gbps);
  std::printf("#\n");
}

void print_header() {
  std::printf("# %10s  %12s  %8s  %6s  %6s  %11s  %7s  %7s  %6s  %11s  %s\n", "size", "count", "type",
              "redop", "root", "time(us)", "algbw", "busbw", "#wrong", "median(us)", "strategy");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %11s  %7s  %7s  %6s  %11s\n", "(B)", "(elements)", "", "", "",
              "", "(GB/s)", "(GB/s)", "", "");
  std::fflush(stdout);
}

void print_row(const Row& r) {
  const std::string wrong = r.wrong ? std::to_string(*r.wrong) : "N/A";
  std::printf("  %10zu  %12zu  %8s  %6s  %6ld  %11.2f  %7.3f  %7.3f  %6s  %11.2f  %s", r.bytes, r.count,
              r.type.c_str(), r.redop.c_str(), r.root, r.time_us, r.algbw, r.busbw, wrong.c_str(),
              r.median_us, r.strategy.c_str());
  if (r.ideal_us) std::printf("  ideal %.2f us (x%.2f)", *r.ideal_us, r.time_us / *r.ideal_us);
  std::printf("\n");
  std::fflush(stdout);
}

void print_failed_row(std::size_t bytes, std::size_t count, const std::string& type,
                      const std::string& redop, long root) {
  std::printf("  %10zu  %12zu  %8s  %6s  %6ld  %11s  %7s  %7s  %6s  %11s\n", bytes, count, type.c_str(),
              redop.c_str(), root, "error", "-", "-", "error", "-");
  std::fflush(stdout);
}

void print_summary(std::size_t wrong, double avg_busbw) {
  std::printf("# Out of bounds values : %zu %s\n", wrong, wrong ? "FAILED" : "OK");
  std::printf("# Avg bus bandwidth    : %g \n", avg_busbw);
  std::printf("#\n");
  std::fflush(stdout);
}

} // namespace chorus::bench
