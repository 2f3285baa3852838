// chorus-bench command line: the flags, their defaults, parsing and validation, and --help.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>
#include <string_view>

#include <chorus/config.hpp>
#include <chorus/strategy.hpp>
#include <chorus/tensor.hpp>
#include <chorus/types.hpp>

namespace chorus::bench {

// What the benchmark runs: every collective plus paired send/recv.
enum class BenchOp : uint8_t {
  all_reduce, reduce, broadcast, all_gather, reduce_scatter,
  all_to_all, gather, scatter, send_recv, barrier
};

std::string_view to_string(BenchOp op);
std::optional<BenchOp> parse_bench_op(std::string_view s);
bool uses_redop(BenchOp op);  // all_reduce, reduce, reduce_scatter
bool is_rooted(BenchOp op);   // reduce, broadcast, gather, scatter


struct Options {
  BenchOp op = BenchOp::all_reduce;
  uint32_t peers = 2;
  DType dtype = DType::f32;
  ReduceOp redop = ReduceOp::sum;
  bool redop_given = false;
  std::string strategy_text = "auto";
  StrategyChoice strategy{};
  std::size_t min_bytes = 1024;
  std::size_t max_bytes = std::size_t{64} << 20;
  std::size_t factor = 2;
  int iters = 20;
  int warmup = 5;
  uint32_t root = 0;
  bool check = true;
  int64_t timeout_ms = 30000;
  DeviceType device = DeviceType::cpu;
  uint32_t gpus = 1;  // --device cuda: peers spread round-robin over GPUs 0..gpus-1
  // --group: the sweep runs inside the subgroup of these global peer ids (empty: the world).
  // Ranks, --root and the busbw factors then refer to the group.
  std::vector<uint32_t> group;
  // Multi-node mode (nodes > 0): `peers` is then the peer count of each node. Without an
  // orchestrator address this process is the launcher: it starts chorus-orchestrator and `nodes`
  // node processes of itself on loopback. With one, this process is one node of the collective.
  uint32_t nodes = 0;
  std::string orchestrator;  // HOST:PORT of a running chorus-orchestrator
  std::string node_address;  // host this node's data connections listen on
  std::string secret;        // --secret, or CHORUS_SECRET; empty: none
  // --transport: between node processes of one host, shared memory (auto) or the sockets (network).
  HostTransport transport = HostTransport::automatic;
  // TLS (all three or none): the control channel and every data connection between nodes; the
  // launcher gives the same files to its orchestrator and its nodes.
  std::string tls_cert, tls_key, tls_ca;
  bool tls() const { return !tls_cert.empty() || !tls_key.empty() || !tls_ca.empty(); }
  bool seal_data = false;  // --seal-data 1: data connections TLS keyed by the secret
  bool rules = false;      // --rules: print the planner's rules; run nothing
  bool explain = false;    // --explain: print the planner's decision for each size; run nothing
  bool multi_node() const { return nodes > 0; }
  bool launcher() const { return nodes > 0 && orchestrator.empty(); }
  // Peers taking part in the sweep: the group's size, or every peer (of every node, assuming
  // --peers on each; a joined node learns the real total when it registers).
  uint32_t participants() const {
    if (!group.empty()) return static_cast<uint32_t>(group.size());
    return nodes ? nodes * peers : peers;
  }
};

struct ParseResult {
  enum class Kind { run, help, error } kind = Kind::run;
  Options options;
  std::string error;  // for Kind::error: one line naming the flag and what is wrong
};

ParseResult parse_options(int argc, const char* const* argv);
std::string usage(std::string_view program);

// "1024", "1K", "64M", "1G" (also lower case and an optional trailing B / iB); powers of 1024.
std::optional<std::size_t> parse_size(std::string_view s);

} // namespace chorus::bench
