#include "options.hpp"

#include <algorithm>
#include <charconv>
#include <iterator>
#include <limits>
#include <vector>

namespace chorus::bench {

namespace {

constexpr std::string_view op_names[] = {"all_reduce", "reduce",     "broadcast", "all_gather",
                                         "reduce_scatter", "all_to_all", "gather", "scatter",
                                         "send_recv",  "barrier"};

template <class T>
std::optional<T> parse_int(std::string_view s) {
  T v{};
  if (s.empty()) return std::nullopt;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

template <class Range, class Name>
std::string join(const Range& items, Name name) {
  std::string r;
  for (const auto& item : items) {
    if (!r.empty()) r.push_back(' ');
    r.append(name(item));
  }
  return r;
}
std::string join_dtypes() { return join(all_dtypes, [](DType t) { return to_string(t); }); }
std::string join_redops() { return join(all_reduce_ops, [](ReduceOp o) { return to_string(o); }); }
std::string join_ops() { return join(op_names, [](std::string_view n) { return n; }); }

ParseResult fail(std::string msg) {
  ParseResult r;
  r.kind = ParseResult::Kind::error;
  r.error = std::move(msg);
  return r;
}

} // namespace

std::string_view to_string(BenchOp op) { return op_names[static_cast<int>(op)]; }

std::optional<BenchOp> parse_bench_op(std::string_view s) {
  for (std::size_t i = 0; i < std::size(op_names); ++i)
    if (op_names[i] == s) return static_cast<BenchOp>(i);
  return std::nullopt;
}

bool uses_redop(BenchOp op) {
  return op == BenchOp::all_reduce || op == BenchOp::reduce || op == BenchOp::reduce_scatter;
}

bool is_rooted(BenchOp op) {
  return op == BenchOp::reduce || op == BenchOp::broadcast || op == BenchOp::gather ||
         op == BenchOp::scatter;
}

std::optional<std::size_t> parse_size(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  if (i == 0) return std::nullopt;
  auto base = parse_int<std::size_t>(s.substr(0, i));
  if (!base) return std::nullopt;
  std::string_view suffix = s.substr(i);
  int shift = 0;
  if (!suffix.empty()) {
    switch (suffix[0]) {
      case 'k': case 'K': shift = 10; suffix.remove_prefix(1); break;
      case 'm': case 'M': shift = 20; suffix.remove_prefix(1); break;
      case 'g': case 'G': shift = 30; suffix.remove_prefix(1); break;
      default: break;
    }
    if (shift && (suffix == "i" || suffix == "iB" || suffix == "ib")) suffix = {};
    if (suffix == "B" || suffix == "b") suffix = {};
    if (!suffix.empty()) return std::nullopt;
  }
  if (shift && *base > (std::numeric_limits<std::size_t>::max() >> shift)) return std::nullopt;
  return *base << shift;
}

std::string usage(std::string_view program) {
  std::string p(program);
  return "usage: " + p + " [flags]\n"
    "Benchmarks one chorus collective over a sweep of buffer sizes, nccl-tests style: one thread per\n"
    "peer on one in-process Runtime (or, with --nodes, one process per node), WARMUP untimed\n"
    "iterations, then ITERS timed ones per size.\n"
    "\n"
    "  --op OP            collective to run (default all_reduce):\n"
    "                     " + join_ops() + "\n"
    "                     send_recv pairs peers 0->1, 2->3, ... (the last peer idles when N is odd);\n"
    "                     barrier ignores the sizes and prints a single row (time only).\n"
    "  --peers N          number of peers, one thread each (default 2; with --nodes: per node)\n"
    "  --dtype T          element type (default f32): " + join_dtypes() + "\n"
    "  --redop R          reduction for all_reduce, reduce, reduce_scatter (default sum):\n"
    "                     " + join_redops() + "\n"
    "                     band, bor and bxor need an integer dtype; avg divides the sum by N\n"
    "                     (integers truncate toward zero)\n"
    "  --strategy S       strategy for every op: auto, centralized, tree:K (K >= 2; tree = tree:2),\n"
    "                     ring, dbtree, direct. Default auto: in one process centralized below\n"
    "                     256 KiB, direct above; with --nodes (then the strategy over all peers of\n"
    "                     all nodes) hierarchical with several peers per node, one-shot for small\n"
    "                     all_reduces of one peer per node, else tree below 256 KiB, ring above\n"
    "  -b, --minbytes SZ  smallest size in bytes (default 1K)\n"
    "  -e, --maxbytes SZ  largest size in bytes (default 64M)\n"
    "  -f, --stepfactor F multiply the size by F (an integer >= 2) between rows (default 2)\n"
    "                     sizes accept K, M, G suffixes (powers of 1024), e.g. -b 1K -e 64M -f 2.\n"
    "                     Size semantics follow nccl-tests: for all_gather, reduce_scatter,\n"
    "                     all_to_all, gather and scatter the size is the whole buffer (N x the\n"
    "                     per-peer block, element count rounded down to a multiple of N); for\n"
    "                     all_reduce, reduce, broadcast and send_recv it is each peer's buffer.\n"
    "  -n, --iters I      timed iterations per size (default 20)\n"
    "  -w, --warmup_iters W  untimed iterations per size before timing (default 5)\n"
    "  --root R           root rank of reduce, broadcast, gather, scatter (default 0)\n"
    "  --group I,J,...    run the sweep inside the subgroup of these global peer ids (ranks, --root\n"
    "                     and busbw then refer to the group; the other peers register and idle;\n"
    "                     with --nodes the ids are global ranks over every node)\n"
    "  -c, --check 0|1    1: after timing, run the op once more on fresh inputs and count the wrong\n"
    "                     elements of every peer against an independent reference (default 1)\n"
    "  --timeout-ms MS    the runtime's per-wait timeout for every op (default 30000)\n"
    "  --device D         cpu (default) or cuda: buffers in GPU memory (inputs filled and results\n"
    "                     checked through host copies, outside the timing); also prints the GPU's\n"
    "                     device-to-device copy bandwidth and the memory-bound ideal of each row\n"
    "  --gpus K           with --device cuda: peer r uses GPU r mod K (default 1: logical peers\n"
    "                     sharing GPU 0; K distinct GPUs let the nccl/auto strategy use NCCL)\n"
    "  -h, --help         this text\n"
    "\n"
    "Multi-node mode (one process per node, one thread per peer, ranks global over all nodes):\n"
    "  --nodes M          run across M >= 1 node processes; --peers N is then the peers of EACH node\n"
    "                     (M x N peers in all; busbw, --root and send_recv pairs use the global\n"
    "                     ranks). Without --orchestrator this process is the launcher: it starts\n"
    "                     chorus-orchestrator (from its own directory) on a free loopback port and M\n"
    "                     node processes of itself, prints the table of global rank 0's node, and\n"
    "                     fails if a node fails, hangs past a limit derived from --timeout-ms and the\n"
    "                     sizes, or finds a wrong value\n"
    "  --orchestrator HOST:PORT  join a running chorus-orchestrator (started with --nodes M) as one\n"
    "                     node instead (real clusters: run this on every node with the same flags);\n"
    "                     only the node that gets global rank 0 prints the table\n"
    "  --node-address H   with --orchestrator: where this node listens for the other nodes' data\n"
    "                     connections, HOST or HOST:PORT (an address they can reach; no port or\n"
    "                     port 0: a free one)\n"
    "  --transport T      between node processes of one host: auto (shared memory; the default) or\n"
    "                     network (their sockets, as between hosts: measures the network path on one\n"
    "                     machine)\n"
    "  --secret S         the orchestrator's shared secret (default: the CHORUS_SECRET environment\n"
    "                     variable; the launcher makes a random one for its own orchestrator)\n"
    "  --tls-cert F       TLS (PEM files, all three together): this node's certificate, its key and\n"
    "  --tls-key F        the CA that signed every node's and the orchestrator's certificate. The\n"
    "  --tls-ca F         control channel and the data connections between nodes are then TLS,\n"
    "                     mutually authenticated; the launcher gives the same files to its\n"
    "                     orchestrator and to every node it starts\n"
    "  --seal-data 0|1    1: without TLS files, the data connections between nodes are TLS keyed by\n"
    "                     the secret (Config::seal_data; no certificates)\n"
    "  --explain [0|1]    1 (or alone): run nothing; print, for each size, the planner's decision\n"
    "                     for these options: where the op meets first (the arena), what runs it\n"
    "                     otherwise, the rounds and messages of its schedule, and why\n"
    "                     (strategies/planner.hpp)\n"
    "  --rules            run nothing; print the planner's rules, the tables every decision is\n"
    "                     read from (strategies/plan_rules.hpp)\n"
    "\n"
    "Columns: size (B), count (elements), type, redop, root (-1: unrooted), time (us per iteration\n"
    "of the slowest peer, mean over ITERS), algbw = size / time (GB/s), busbw = algbw x factor\n"
    "(all_reduce 2(N-1)/N; reduce_scatter, all_gather, all_to_all, gather, scatter (N-1)/N;\n"
    "broadcast, reduce, send_recv 1; barrier 0), #wrong (N/A with --check 0), median(us) (median\n"
    "of peer 0's per-iteration times) and the strategy that ran (as the library reports it to\n"
    "rank 0; GPU ops: nccl or device; send_recv: p2p). With --nodes, N counts\n"
    "every peer of every node, each size's timed loop starts after a barrier of all peers, and\n"
    "the slowest peer's time and the total #wrong are collected with all_reduce after it.\n"
    "Exit status: 0 all correct, 1 a wrong value or an op error, 2 usage error.\n";
}

ParseResult parse_options(int argc, const char* const* argv) {
  ParseResult res;
  Options& o = res.options;
  std::vector<std::string_view> args(argv + 1, argv + argc);
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view flag = args[i];
    std::string_view value;
    bool has_inline = false;
    if (flag.substr(0, 2) == "--") {
      if (auto eq = flag.find('='); eq != std::string_view::npos) {
        value = flag.substr(eq + 1);
        flag = flag.substr(0, eq);
        has_inline = true;
      }
    } else if (flag.size() > 2 && flag[0] == '-' && flag[1] != '-') {  // -b1K
      value = flag.substr(2);
      flag = flag.substr(0, 2);
      has_inline = true;
    }
    if (flag == "-h" || flag == "--help") {
      res.kind = ParseResult::Kind::help;
      return res;
    }
    auto next = [&]() -> std::optional<std::string_view> {
      if (has_inline) return value;
      if (i + 1 >= args.size()) return std::nullopt;
      return args[++i];
    };
    std::string f(flag);
    static constexpr std::string_view known[] = {
        "--op", "--peers", "--dtype", "--redop", "--strategy", "-b", "--minbytes", "-e", "--maxbytes",
        "-f", "--stepfactor", "-n", "--iters", "-w", "--warmup_iters", "--root", "-c", "--check",
        "--timeout-ms", "--device", "--gpus", "--group", "--nodes", "--orchestrator", "--node-address", "--secret", "--transport",
        "--tls-cert", "--tls-key", "--tls-ca", "--seal-data", "--explain", "--rules"};
    if (std::find(std::begin(known), std::end(known), flag) == std::end(known))
      return fail("unknown flag " + std::string(args[i]));
    if (flag == "--rules") {
      o.rules = true;
      continue;
    }
    // --explain alone means --explain 1 (nccl-tests' 0|1 form still works).
    if (flag == "--explain" && !has_inline && (i + 1 >= args.size() || args[i + 1].substr(0, 1) == "-")) {
      o.explain = true;
      continue;
    }
    auto v = next();
    if (!v) return fail(f + " needs a value");
    std::string vs(*v);
    if (flag == "--group") {
      o.group.clear();
      std::size_t at = 0;
      while (at <= vs.size()) {
        std::size_t comma = vs.find(',', at);
        std::string item = vs.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        char* end = nullptr;
        unsigned long id = std::strtoul(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0') return fail("--group " + vs + ": expected global peer ids like 0,2,5");
        o.group.push_back(static_cast<uint32_t>(id));
        if (comma == std::string::npos) break;
        at = comma + 1;
      }
      continue;
    }
    if (flag == "--op") {
      auto op = parse_bench_op(*v);
      if (!op) return fail("--op " + vs + ": unknown op; one of: " + join_ops());
      o.op = *op;
    } else if (flag == "--peers") {
      auto n = parse_int<uint32_t>(*v);
      if (!n || *n < 1 || *n > 4096) return fail("--peers " + vs + ": need an integer in [1, 4096]");
      o.peers = *n;
    } else if (flag == "--dtype") {
      auto t = parse_dtype(*v);
      if (!t) return fail("--dtype " + vs + ": unknown dtype; one of: " + join_dtypes());
      o.dtype = *t;
    } else if (flag == "--redop") {
      auto r = parse_reduce_op(*v);
      if (!r) return fail("--redop " + vs + ": unknown reduction; one of: " + join_redops());
      o.redop = *r;
      o.redop_given = true;
    } else if (flag == "--strategy") {
      auto s = parse_strategy(*v);
      if (!s) return fail("--strategy " + vs + ": expected auto, centralized, tree:K (K >= 2), ring, dbtree or direct");
      o.strategy = *s;
      o.strategy_text = vs;
    } else if (flag == "-b" || flag == "--minbytes") {
      auto s = parse_size(*v);
      if (!s) return fail(f + " " + vs + ": expected a size in bytes such as 1024, 1K, 64M, 1G");
      o.min_bytes = *s;
    } else if (flag == "-e" || flag == "--maxbytes") {
      auto s = parse_size(*v);
      if (!s) return fail(f + " " + vs + ": expected a size in bytes such as 1024, 1K, 64M, 1G");
      o.max_bytes = *s;
    } else if (flag == "-f" || flag == "--stepfactor") {
      auto s = parse_int<std::size_t>(*v);
      if (!s || *s < 2) return fail(f + " " + vs + ": the step factor must be an integer >= 2");
      o.factor = *s;
    } else if (flag == "-n" || flag == "--iters") {
      auto n = parse_int<int>(*v);
      if (!n || *n < 1) return fail(f + " " + vs + ": need a positive number of iterations");
      o.iters = *n;
    } else if (flag == "-w" || flag == "--warmup_iters") {
      auto n = parse_int<int>(*v);
      if (!n || *n < 0) return fail(f + " " + vs + ": need a number of warmup iterations >= 0");
      o.warmup = *n;
    } else if (flag == "--root") {
      auto r = parse_int<uint32_t>(*v);
      if (!r) return fail("--root " + vs + ": need a peer index >= 0");
      o.root = *r;
    } else if (flag == "-c" || flag == "--check") {
      if (*v == "0") o.check = false;
      else if (*v == "1") o.check = true;
      else return fail(f + " " + vs + ": expected 0 or 1");
    } else if (flag == "--timeout-ms") {
      auto t = parse_int<int64_t>(*v);
      if (!t || *t <= 0) return fail("--timeout-ms " + vs + ": need a positive number of milliseconds");
      o.timeout_ms = *t;
    } else if (flag == "--nodes") {
      auto n = parse_int<uint32_t>(*v);
      if (!n || *n < 1 || *n > 65536) return fail("--nodes " + vs + ": need an integer in [1, 65536]");
      o.nodes = *n;
    } else if (flag == "--orchestrator") {
      const auto colon = vs.rfind(':');
      std::optional<uint32_t> port;
      if (colon != std::string::npos) port = parse_int<uint32_t>(std::string_view(vs).substr(colon + 1));
      if (colon == 0 || !port || *port < 1 || *port > 65535)
        return fail("--orchestrator " + vs + ": expected HOST:PORT, e.g. 10.0.0.1:7700");
      o.orchestrator = vs;
    } else if (flag == "--node-address") {
      if (vs.empty() || vs[0] == ':') return fail("--node-address " + vs + ": expected HOST or HOST:PORT");
      o.node_address = vs;
    } else if (flag == "--secret") {
      o.secret = vs;
    } else if (flag == "--explain") {
      if (vs != "0" && vs != "1") return fail("--explain " + vs + ": expected 0 or 1");
      o.explain = vs == "1";
    } else if (flag == "--seal-data") {
      if (vs != "0" && vs != "1") return fail("--seal-data " + vs + ": expected 0 or 1");
      o.seal_data = vs == "1";
    } else if (flag == "--transport") {
      if (vs != "auto" && vs != "network") return fail("--transport " + vs + ": expected auto or network");
      o.transport = vs == "auto" ? HostTransport::automatic : HostTransport::network;
    } else if (flag == "--tls-cert" || flag == "--tls-key" || flag == "--tls-ca") {
      if (vs.empty()) return fail(f + " needs a file");
      (flag == "--tls-cert" ? o.tls_cert : flag == "--tls-key" ? o.tls_key : o.tls_ca) = vs;
    } else if (flag == "--gpus") {
      auto n = parse_int<uint32_t>(vs);
      if (!n || *n < 1 || *n > 1024) return fail("--gpus " + vs + ": need an integer in [1, 1024]");
      o.gpus = *n;
    } else if (flag == "--device") {
      if (*v == "cpu") o.device = DeviceType::cpu;
      else if (*v == "cuda") o.device = DeviceType::cuda;
      else return fail("--device " + vs + ": expected cpu or cuda");
    }
  }
  // Cross-flag checks.
  if (o.min_bytes > o.max_bytes)
    return fail("-b " + std::to_string(o.min_bytes) + " is larger than -e " + std::to_string(o.max_bytes));
  if (uses_redop(o.op) && !reduce_op_valid(o.dtype, o.redop))
    return fail("--redop " + std::string(to_string(o.redop)) + " is not defined for --dtype " +
                std::string(to_string(o.dtype)) +
                ": the bitwise reductions band, bor, bxor need an integer dtype (i8 u8 i32 i64)");
  // Across nodes group members are global ranks; a joined node learns the total when it registers
  // (new_group then names a member that is not a peer).
  const bool knows_total = !o.multi_node() || o.orchestrator.empty();
  const uint32_t world = o.multi_node() ? o.nodes * o.peers : o.peers;
  for (std::size_t i = 0; i < o.group.size(); ++i) {
    if (knows_total && o.group[i] >= world)
      return fail("--group: peer " + std::to_string(o.group[i]) + " is not a peer (" +
                  (o.multi_node() ? "--nodes x --peers = " + std::to_string(world) + " peers"
                                  : "--peers " + std::to_string(o.peers)) +
                  ")");
    for (std::size_t j = 0; j < i; ++j)
      if (o.group[j] == o.group[i]) return fail("--group: peer " + std::to_string(o.group[i]) + " is listed twice");
  }
  if (o.gpus > 1 && o.device != DeviceType::cuda) return fail("--gpus needs --device cuda");
  if (!o.multi_node()) {
    if (!o.orchestrator.empty()) return fail("--orchestrator needs --nodes M (the nodes of the collective)");
    if (!o.node_address.empty()) return fail("--node-address needs --nodes M and --orchestrator HOST:PORT");
    if (!o.secret.empty()) return fail("--secret needs --nodes M (it is the orchestrator's secret)");
    if (o.tls()) return fail("--tls-cert, --tls-key and --tls-ca need --nodes M (TLS between node processes)");
    if (o.seal_data) return fail("--seal-data needs --nodes M (it seals the connections between node processes)");
  } else {
    if (!o.orchestrator.empty() && o.node_address.empty())
      return fail("--orchestrator needs --node-address HOST (where the other nodes reach this one)");
    if (o.orchestrator.empty() && !o.node_address.empty())
      return fail("--node-address needs --orchestrator HOST:PORT (the launcher picks 127.0.0.1 itself)");
    if (o.tls() && (o.tls_cert.empty() || o.tls_key.empty() || o.tls_ca.empty()))
      return fail("TLS needs --tls-cert, --tls-key and --tls-ca together");
  }
  // A joined node checks --root against the real peer total once it has registered.
  if (is_rooted(o.op) && o.root >= o.participants() && o.orchestrator.empty())
    return fail("--root " + std::to_string(o.root) + " is not a rank: the sweep has " +
                std::to_string(o.participants()) + " peers (ranks 0.." + std::to_string(o.participants() - 1) + ")");
  if (o.op == BenchOp::send_recv && o.participants() < 2)
    return fail(o.multi_node()
                    ? "--op send_recv needs 2 or more peers in all (--nodes x --peers; ranks pair up 0->1, 2->3, ...)"
                    : "--op send_recv needs --peers 2 or more (peers pair up 0->1, 2->3, ...)");
  return res;
}

} // namespace chorus::bench
