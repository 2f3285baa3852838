// nccl-tests style output: preamble, column header, one row per size, and the closing summary.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "options.hpp"

namespace chorus::bench {

// busbw = algbw x factor (nccl-tests): all_reduce 2(n-1)/n; reduce_scatter, all_gather,
// all_to_all, gather, scatter (n-1)/n; broadcast, reduce, send_recv 1; barrier 0.
double bus_factor(BenchOp op, uint32_t peers);

struct Row {
  std::size_t bytes = 0;
  std::size_t count = 0;
  std::string type, redop;
  long root = -1;
  double time_us = 0;    // mean per iteration, slowest peer
  double algbw = 0;      // GB/s
  double busbw = 0;      // GB/s
  std::optional<std::size_t> wrong;  // nullopt: not checked
  double median_us = 0;  // median per-iteration time on peer 0
  std::string strategy;
  std::optional<double> ideal_us;  // --device cuda all_reduce: the memory-bound ideal time
};

// algbw in GB/s for `bytes` moved in `time_us`.
double alg_bandwidth(std::size_t bytes, double time_us);

// Multi-node runs: what the preamble says about the nodes (from the node of global rank 0).
struct NodesInfo {
  uint32_t nodes = 0;
  uint32_t total_peers = 0;  // over all nodes
  uint32_t local_peers = 0;  // of the printing node
  std::string orchestrator;  // HOST:PORT
};

// `nodes`: null for one in-process Runtime.
void print_preamble(const Options& o, unsigned hardware_threads, const NodesInfo* nodes = nullptr);
// --device cuda: the GPUs and the copy bandwidth the ideal column is measured against.
void print_devices(const std::vector<std::string>& names, double copy_gbps);
void print_header();
void print_row(const Row& r);
void print_failed_row(std::size_t bytes, std::size_t count, const std::string& type,
                      const std::string& redop, long root);
void print_summary(std::size_t wrong, double avg_busbw);

} // namespace chorus::bench
