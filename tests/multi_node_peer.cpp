// One node process of the multi-node tests (multi_node_test.cpp starts the orchestrator and several
// of these). It registers --peers local peers, runs a scenario on every peer thread, verifies
// every result against values computed here independently, and prints one line per peer:
//   PEER <global rank> OK <ops>            every op of the scenario gave the expected result
//   PEER <global rank> ERR <code> <message>  the first op that failed, with its status
// Exit status: 0 when every local peer printed OK (or, for the failure scenarios, when every peer
// got an error), 1 otherwise.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <chorus/gpu.hpp>
#include <chorus/grad_sync.hpp>
#include <chorus/runtime.hpp>
#include "strategies/tuning.hpp"
#include "testkit/reference.hpp"

using namespace chorus;

namespace {

struct Args {
  std::string tls_cert, tls_key, tls_ca;
  std::string orchestrator, address = "127.0.0.1", secret, scenario = "every-op", strategy = "auto";
  uint32_t nodes = 0, peers = 1, ops = 100;
  int64_t timeout_ms = 10000;
  int victim_node = -1;  // kill / freeze / mismatch: which node misbehaves (by its first peer's rank)
  uint32_t at_op = 0;
};

std::mutex out_mu;
void say(const std::string& line) {
  std::lock_guard<std::mutex> lk(out_mu);
  std::cout << line << std::endl;
}

// Small integers, exact in every dtype and summable over 16 peers without overflow (even i8).
int64_t value(uint32_t rank, std::size_t i, ReduceOp op) {
  if (op == ReduceOp::prod) return 1 + static_cast<int64_t>((rank + i) % 2);
  return 1 + static_cast<int64_t>((rank * 7 + i * 3) % 5);
}

Tensor make_input(DType t, uint32_t rank, std::size_t count, ReduceOp op, std::size_t base = 0) {
  Tensor x = Tensor::zeros(t, {static_cast<int64_t>(count)});
  for (std::size_t i = 0; i < count; ++i) {
    if (ref::floating(t)) ref::set_f(t, x.data(), i, static_cast<double>(value(rank, base + i, op)));
    else ref::set_i(t, x.data(), i, value(rank, base + i, op));
  }
  return x;
}

// Element i of the reduction over all n peers (inputs value(r, base + i)).
bool check_reduced(const Tensor& got, DType t, ReduceOp op, uint32_t n, std::size_t count, std::size_t base,
                   std::string& why) {
  for (std::size_t i = 0; i < count; ++i) {
    if (ref::floating(t)) {
      std::vector<double> v;
      for (uint32_t r = 0; r < n; ++r) v.push_back(static_cast<double>(value(r, base + i, op)));
      double want = ref::reduce_f(op, v.data(), n);
      double have = ref::get_f(t, got.data(), i);
      if (std::abs(have - want) > 1e-2 * std::max(1.0, std::abs(want))) {
        why = "element " + std::to_string(i) + ": " + std::to_string(have) + " != " + std::to_string(want);
        return false;
      }
    } else {
      std::vector<int64_t> v;
      for (uint32_t r = 0; r < n; ++r) v.push_back(ref::wrap(t, static_cast<uint64_t>(value(r, base + i, op))));
      int64_t want = ref::reduce_i(t, op, v.data(), n);
      int64_t have = ref::get_i(t, got.data(), i);
      if (have != want) {
        why = "element " + std::to_string(i) + ": " + std::to_string(have) + " != " + std::to_string(want);
        return false;
      }
    }
  }
  return true;
}

// Element i equals value(rank_of(i), base_of(i)) (gathers, broadcasts, all-to-all).
template <class RankOf, class BaseOf>
bool check_values(const Tensor& got, std::size_t count, RankOf rank_of, BaseOf base_of, std::string& why) {
  for (std::size_t i = 0; i < count; ++i) {
    double have = ref::get_f(DType::f32, got.data(), i);
    double want = static_cast<double>(value(rank_of(i), base_of(i), ReduceOp::sum));
    if (have != want) {
      why = "element " + std::to_string(i) + ": " + std::to_string(have) + " != " + std::to_string(want);
      return false;
    }
  }
  return true;
}

struct Fail {
  Status status;
};

void must(const Status& s) {
  if (!s) throw Fail{s};
}
void verify(bool ok, const std::string& what, const std::string& why) {
  if (!ok) throw Fail{Status(Errc::internal, "WRONG RESULT in " + what + ": " + why)};
}

// One op of the mixed / every-op scenarios, chosen by `k`; the same k on every peer.
void run_op(Peer& p, int k, std::size_t count, uint32_t root) {
  const uint32_t n = p.size(), me = p.rank();
  const std::size_t c = count;
  std::string why;
  switch (k) {
    case 0: {
      Tensor x = make_input(DType::f32, me, c, ReduceOp::sum);
      must(p.all_reduce(x, ReduceOp::sum));
      verify(check_reduced(x, DType::f32, ReduceOp::sum, n, c, 0, why), "all_reduce", why);
      break;
    }
    case 1: {
      Tensor x = make_input(DType::f32, me, c, ReduceOp::max);
      Tensor out = Tensor::zeros(DType::f32, {static_cast<int64_t>(c)});
      must(p.reduce(x, out, ReduceOp::max, root));
      if (me == root) verify(check_reduced(out, DType::f32, ReduceOp::max, n, c, 0, why), "reduce", why);
      break;
    }
    case 2: {
      Tensor x = me == root ? make_input(DType::f32, root, c, ReduceOp::sum) : Tensor::zeros(DType::f32, {static_cast<int64_t>(c)});
      must(p.broadcast(x, root));
      verify(check_values(x, c, [&](std::size_t) { return root; }, [](std::size_t i) { return i; }, why), "broadcast", why);
      break;
    }
    case 3: {
      Tensor x = make_input(DType::f32, me, c, ReduceOp::sum);
      Tensor out = Tensor::zeros(DType::f32, {static_cast<int64_t>(n * c)});
      must(p.all_gather(x, out));
      verify(check_values(out, n * c, [&](std::size_t i) { return static_cast<uint32_t>(i / c); },
                          [&](std::size_t i) { return i % c; }, why), "all_gather", why);
      break;
    }
    case 4: {
      Tensor x = make_input(DType::f32, me, n * c, ReduceOp::sum);
      Tensor out = Tensor::zeros(DType::f32, {static_cast<int64_t>(c)});
      must(p.reduce_scatter(x, out, ReduceOp::sum));
      verify(check_reduced(out, DType::f32, ReduceOp::sum, n, c, me * c, why), "reduce_scatter", why);
      break;
    }
    case 5: {  // block j of rank r's input holds value(r, j*c + i); block r of my output comes from r
      Tensor x = make_input(DType::f32, me, n * c, ReduceOp::sum);
      Tensor out = Tensor::zeros(DType::f32, {static_cast<int64_t>(n * c)});
      must(p.all_to_all(x, out));
      verify(check_values(out, n * c, [&](std::size_t i) { return static_cast<uint32_t>(i / c); },
                          [&](std::size_t i) { return me * c + i % c; }, why), "all_to_all", why);
      break;
    }
    case 6: {
      Tensor x = make_input(DType::f32, me, c, ReduceOp::sum);
      Tensor out = Tensor::zeros(DType::f32, {static_cast<int64_t>(n * c)});
      must(p.gather(x, out, root));
      if (me == root)
        verify(check_values(out, n * c, [&](std::size_t i) { return static_cast<uint32_t>(i / c); },
                            [&](std::size_t i) { return i % c; }, why), "gather", why);
      break;
    }
    case 7: {
      Tensor x = me == root ? make_input(DType::f32, root, n * c, ReduceOp::sum) : Tensor();
      Tensor out = Tensor::zeros(DType::f32, {static_cast<int64_t>(c)});
      must(p.scatter(x, out, root));
      verify(check_values(out, c, [&](std::size_t) { return root; }, [&](std::size_t i) { return me * c + i; }, why),
             "scatter", why);
      break;
    }
    case 8: must(p.barrier()); break;
    case 9: {  // a ring of sends: to rank+1, from rank-1 (ranks on other nodes included)
      if (n < 2) break;
      Tensor x = make_input(DType::f32, me, c, ReduceOp::sum);
      Tensor in = Tensor::zeros(DType::f32, {static_cast<int64_t>(c)});
      const uint32_t to = (me + 1) % n, from = (me + n - 1) % n;
      // Even ranks send first, odd ranks receive first, so the blocking pairs never wait in a circle.
      if (me % 2 == 0) {
        must(p.send(x, to, 7));
        must(p.recv(in, from, 7));
      } else {
        must(p.recv(in, from, 7));
        must(p.send(x, to, 7));
      }
      verify(check_values(in, c, [&](std::size_t) { return from; }, [](std::size_t i) { return i; }, why), "send/recv", why);
      break;
    }
    case 10: {  // broadcast by data from `root`
      auto r = p.broadcast(me == root ? std::optional<Tensor>(make_input(DType::f32, root, c, ReduceOp::sum)) : std::nullopt);
      must(r.status());
      verify(r->numel() == c && check_values(*r, c, [&](std::size_t) { return root; }, [](std::size_t i) { return i; }, why),
             "broadcast by data", why);
      break;
    }
    case 11: {  // scatter by data from `root`
      auto r = p.scatter(me == root ? std::optional<Tensor>(make_input(DType::f32, root, n * c, ReduceOp::sum)) : std::nullopt);
      must(r.status());
      verify(r->numel() == c && check_values(*r, c, [&](std::size_t) { return root; }, [&](std::size_t i) { return me * c + i; }, why),
             "scatter by data", why);
      break;
    }
    case 12: {  // object all-gather: every peer's bytes, of different lengths
      auto r = p.all_gather_object(std::string(me % 5, static_cast<char>('a' + me % 26)));
      must(r.status());
      bool ok = r->size() == n;
      for (uint32_t q = 0; ok && q < n; ++q) ok = (*r)[q] == std::string(q % 5, static_cast<char>('a' + q % 26));
      verify(ok, "all_gather_object", "wrong strings");
      break;
    }
  }
}

constexpr int kOps = 13;

// Groups across nodes (made for 3 nodes x 2 peers; works for any even world): disjoint pairs
// spanning nodes interleaved with world ops, a split by color with keys reversing the order,
// the intra-node and inter-node groups, object broadcasts of 0 B to 8 MiB, every op of run_op
// inside a split group, and an op on a destroyed group.
int groups(Peer& world) {
  const uint32_t n = world.size(), me = world.rank();
  int done = 0;
  std::string why;
  // Pairs (r, r + n/2): always on different nodes when nodes hold consecutive ranks.
  const uint32_t half = n / 2, partner = me < half ? me + half : me - half;
  std::vector<PeerId> pair{std::min(me, partner), std::max(me, partner)};
  auto g = world.new_group(pair);
  must(g.status());
  verify(g->size() == 2 && g->rank() == (me < half ? 0u : 1u), "pair group", "wrong size or rank");
  for (int i = 0; i < 10; ++i, done += 2) {
    Tensor x = Tensor::from(std::vector<float>(1000, static_cast<float>(me)));
    must(g->all_reduce(x, ReduceOp::sum));
    verify(x.data_as<float>()[999] == static_cast<float>(me + partner), "pair all_reduce",
           "got " + std::to_string(x.data_as<float>()[999]) + " at 999, " + std::to_string(x.data_as<float>()[0]) + " at 0");
    Tensor y = Tensor::from(std::vector<float>(500, 1.0f));
    must(world.all_reduce(y, ReduceOp::sum));
    verify(y.data_as<float>()[0] == static_cast<float>(n), "world all_reduce between pair ops", "wrong sum");
  }
  // Split: color by parity, key reverses the order.
  auto sp = world.split(static_cast<int>(me % 2), -static_cast<int>(me));
  must(sp.status());
  {
    Tensor x = Tensor::from(std::vector<float>{static_cast<float>(me)});
    Tensor out = Tensor::zeros(DType::f32, {static_cast<int64_t>(sp->size())});
    must(sp->all_gather(x, out));
    bool ok = true;
    for (uint32_t r = 0; r < sp->size(); ++r)  // rank r holds the r-th largest rank of my parity
      ok = ok && out.data_as<float>()[r] == static_cast<float>(sp->members()[r]) && (r == 0 || sp->members()[r] < sp->members()[r - 1]);
    verify(ok, "split all_gather", "wrong order");
    ++done;
    for (int k = 0; k < kOps; ++k, ++done) run_op(*sp, k, 257, sp->size() - 1);
  }
  // Intra-node and inter-node groups.
  auto intra = world.intra_node();
  must(intra.status());
  for (PeerId m : intra->members())
    verify(m / intra->size() == me / intra->size(), "intra_node", "member " + std::to_string(m) + " of another node");
  auto inter = world.inter_node();
  must(inter.status());
  {
    Tensor x = Tensor::from(std::vector<float>{1.0f});
    must(intra->all_reduce(x, ReduceOp::sum));
    verify(x.data_as<float>()[0] == static_cast<float>(intra->size()), "intra_node all_reduce", "wrong count");
    ++done;
    if (inter->size() > 0) {
      Tensor y = Tensor::from(std::vector<float>{1.0f});
      must(inter->all_reduce(y, ReduceOp::sum));
      verify(y.data_as<float>()[0] * static_cast<float>(intra->size()) == static_cast<float>(n), "inter_node all_reduce",
             "wrong number of leaders");
    }
    ++done;
  }
  // Object broadcasts of different lengths inside the split group.
  for (std::size_t len : {std::size_t{0}, std::size_t{1}, std::size_t{1000}, std::size_t{8} << 20}) {
    std::string blob(len, static_cast<char>('A' + len % 26));
    auto got = sp->broadcast_object(sp->rank() == 0 ? std::optional<std::string>(blob) : std::nullopt);
    must(got.status());
    verify(*got == blob, "broadcast_object " + std::to_string(len) + " B", "wrong bytes");
    ++done;
  }
  // Destroyed: ops on it fail.
  must(g->destroy());
  Tensor z = Tensor::from(std::vector<float>{1.0f});
  Status after = g->all_reduce(z, ReduceOp::sum);
  verify(!after && after.code() == Errc::invalid_argument, "op on a destroyed group", after.to_string());
  ++done;
  return done;
}

// Every op (roots on several nodes), then every dtype x reduce op through all_reduce.
int every_op(Peer& p) {
  int done = 0;
  const uint32_t n = p.size();
  for (uint32_t root : {0u, n - 1, n / 2})
    for (std::size_t count : {std::size_t{1}, std::size_t{3}, std::size_t{1000}, std::size_t{70000}})
      for (int k = 0; k < kOps; ++k, ++done) run_op(p, k, count, root);
  for (DType t : all_dtypes)
    for (ReduceOp op : all_reduce_ops) {
      bool bitwise = op == ReduceOp::band || op == ReduceOp::bor || op == ReduceOp::bxor;
      if (bitwise && ref::floating(t)) continue;
      if (op == ReduceOp::prod && n > 6) continue;
      for (std::size_t count : {std::size_t{5}, std::size_t{4099}}) {
        Tensor x = make_input(t, p.rank(), count, op);
        Tensor out = Tensor::zeros(t, {static_cast<int64_t>(count)});
        must(p.all_reduce(x, out, op));
        std::string why;
        verify(check_reduced(out, t, op, n, count, 0, why),
               "all_reduce " + std::string(to_string(t)) + " " + std::string(to_string(op)), why);
        ++done;
      }
    }
  return done;
}

// `ops` consecutive ops, kind and size drawn from one seed shared by every peer.
int mixed(Peer& p, uint32_t ops) {
  std::mt19937 rng(12345);
  for (uint32_t i = 0; i < ops; ++i) {
    int k = static_cast<int>(rng() % kOps);
    std::size_t count = 1 + rng() % 3000;
    uint32_t root = rng() % p.size();
    run_op(p, k, count, root);
  }
  return static_cast<int>(ops);
}

// Every op reports what ran it (Peer::last_strategy): the tuning module's pick for this topology,
// every node on this machine (127.0.0.1, registering its hardware threads) with `peers` peers
// each, so rank r is on node r / peers. Small and large sizes, hierarchical kinds and flat ones.
int strategies(Peer& p, const Config& cfg, uint32_t peers) {
  const uint32_t n = p.size(), nodes = n / peers;
  Topology t;
  t.peers = static_cast<int>(n);
  t.shared_memory = false;
  for (uint32_t r = 0; r < n; ++r) t.rank_node.push_back(r / peers);
  t.node_host.assign(nodes, "127.0.0.1");
  t.node_threads.assign(nodes, std::max(1u, std::thread::hardware_concurrency()));
  int done = 0;
  auto expect = [&](OpKind kind, std::size_t count) {
    const std::string want = to_string(tune(cfg, kind, DType::f32, count, t)), got = p.last_strategy();
    verify(got == want, "last_strategy", std::string(to_string(kind)) + " of " + std::to_string(count) +
                                             " elements ran " + got + ", the tuning module picks " + want);
    // Several peers on each of several nodes: all-reduce goes through the node leaders.
    if (kind == OpKind::all_reduce) verify((peers > 1 && nodes > 1) == (got.rfind("hier+", 0) == 0), "hierarchy", got);
    ++done;
  };
  for (std::size_t count : {std::size_t{16}, cfg.auto_threshold_bytes}) {
    Tensor x = Tensor::zeros(DType::f32, {static_cast<int64_t>(count)});
    must(p.all_reduce(x, ReduceOp::sum));
    expect(OpKind::all_reduce, count);
    Tensor all = Tensor::zeros(DType::f32, {static_cast<int64_t>(count * n)});
    must(p.all_gather(x, all));
    expect(OpKind::all_gather, count);
    must(p.reduce_scatter(all, x, ReduceOp::sum));
    expect(OpKind::reduce_scatter, count);
    must(p.broadcast(x, 0));
    expect(OpKind::broadcast, count);
  }
  must(p.barrier());
  expect(OpKind::barrier, 0);
  if (p.rank() == 0 || p.rank() == n - 1) {
    Tensor x = Tensor::zeros(DType::f32, {4});
    must(p.rank() == 0 ? p.send(x, n - 1) : p.recv(x, 0));
    verify(p.last_strategy() == "p2p", "last_strategy", "send/recv ran " + p.last_strategy());
  }
  return done + 1;
}

int parse(int argc, char** argv, Args& a) {
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--orchestrator") a.orchestrator = v;
    else if (k == "--address") a.address = v;
    else if (k == "--secret") a.secret = v;
    else if (k == "--tls-cert") a.tls_cert = v;
    else if (k == "--tls-key") a.tls_key = v;
    else if (k == "--tls-ca") a.tls_ca = v;
    else if (k == "--scenario") a.scenario = v;
    else if (k == "--strategy") a.strategy = v;
    else if (k == "--nodes") a.nodes = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--peers") a.peers = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--ops") a.ops = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--timeout-ms") a.timeout_ms = std::stoll(v);
    else if (k == "--victim") a.victim_node = std::stoi(v);
    else if (k == "--at-op") a.at_op = static_cast<uint32_t>(std::stoul(v));
    else {
      std::cerr << "unknown flag " << k << "\n";
      return 2;
    }
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  Args a;
  if (int rc = parse(argc, argv, a)) return rc;
  Config cfg;
  cfg.num_devices = a.peers;
  cfg.num_nodes = a.nodes;
  cfg.orchestrator_address = a.orchestrator;
  cfg.node_address = a.address;
  cfg.secret = a.secret;
  cfg.tls_certificate = a.tls_cert;
  cfg.tls_key = a.tls_key;
  cfg.tls_ca = a.tls_ca;
  cfg.timeout = std::chrono::milliseconds(a.timeout_ms);
  auto choice = parse_strategy(a.strategy);
  if (!choice) {
    std::cerr << "bad --strategy\n";
    return 2;
  }
  cfg.with_global_strategy(*choice);
  Runtime rt;
  std::vector<int> ok(a.peers, 0);
  std::vector<std::thread> threads;
  for (uint32_t id = 0; id < a.peers; ++id)
    threads.emplace_back([&, id] {
      auto reg = rt.register_peer(id, cfg);
      if (!reg) {
        say("PEER ? ERR " + std::string(to_string(reg.status().code())) + " " + reg.status().message());
        return;
      }
      Peer p = *reg;
      const std::string me = "PEER " + std::to_string(p.rank()) + " ";
      try {
        int done = 0;
        if (a.scenario == "every-op") {
          done = every_op(p);
        } else if (a.scenario == "mixed") {
          done = mixed(p, a.ops);
        } else if (a.scenario == "mismatch") {
          // The victim node's peers pass one element more: every peer must get the same error.
          const bool odd = p.rank() >= static_cast<uint32_t>(a.victim_node) &&
                           p.rank() < static_cast<uint32_t>(a.victim_node) + a.peers;
          Tensor x = make_input(DType::f32, p.rank(), odd ? 11 : 10, ReduceOp::sum);
          must(p.all_reduce(x, ReduceOp::sum));
          done = 1;
        } else if (a.scenario == "local-mismatch" || a.scenario == "gpu-staging" || a.scenario == "gpu-staging-two") {
          // The victim rank's op cannot run on its node: it passes one element more than its
          // node-mate (local-mismatch), or a GPU tensor that cannot be copied to the host, there
          // being no such GPU (gpu-staging; gpu-staging-two: ranks 1 and the victim, on two
          // nodes). Every peer of every node must get the same error, and the next op must line up
          // and work.
          const bool victim = p.rank() == static_cast<uint32_t>(a.victim_node) ||
                              (a.scenario == "gpu-staging-two" && p.rank() == 1);
          Tensor x = make_input(DType::f32, p.rank(), victim && a.scenario == "local-mismatch" ? 11 : 10, ReduceOp::sum);
          if (victim && a.scenario != "local-mismatch")
            x = Tensor::borrow(reinterpret_cast<void*>(uintptr_t{0x7f0000001000}), DType::f32, {10},
                               Device::cuda(gpu::device_count() + 5));
          Status first = p.all_reduce(x, ReduceOp::sum);
          Tensor y = Tensor::from(std::vector<int32_t>{1});
          must(p.all_reduce(y, ReduceOp::sum));
          if (y.to_vector<int32_t>()[0] != static_cast<int32_t>(p.size()))
            throw Fail{Status(Errc::internal, "the op after the failed one gave a wrong sum")};
          must(first);
          done = 2;
        } else if (a.scenario == "p2p-staging") {
          // Rank 0 sends rank 2 (another node) a GPU tensor it cannot stage: both get the same
          // error at once, and the next send/recv of the pair works.
          if (p.rank() == 0 || p.rank() == 2) {
            Tensor host = Tensor::from(std::vector<float>(6, 1.f));
            Status first;
            if (p.rank() == 0) {
              first = p.send(Tensor::borrow(reinterpret_cast<void*>(uintptr_t{0x7f0000001000}), DType::f32, {6},
                                            Device::cuda(gpu::device_count() + 5)),
                             2);
              must(p.send(host, 2, 1));
            } else {
              first = p.recv(host, 0);
              Tensor again = Tensor::zeros(DType::f32, {6});
              must(p.recv(again, 0, 1));
              if (again.to_vector<float>() != std::vector<float>(6, 1.f))
                throw Fail{Status(Errc::internal, "the send after the failed one arrived wrong")};
            }
            must(first);
          }
          done = 1;
        } else if (a.scenario == "strategies") {
          done = strategies(p, cfg, a.peers);
        } else if (a.scenario == "groups") {
          done = groups(p);
        } else if (a.scenario == "group-mismatch") {
          // Peers 0 and 2 ask for {0, 1, 2}; peer 1 asks for {0, 1}: all three must fail.
          if (p.rank() <= 2) {
            std::vector<PeerId> m = p.rank() == 1 ? std::vector<PeerId>{0, 1} : std::vector<PeerId>{0, 1, 2};
            auto g = p.new_group(m);
            must(g.status());
          }
          done = 1;
        } else if (a.scenario == "gradsync") {
          // Data-parallel gradient sync across nodes: 5 parameters in 3 fusion buckets, submitted in
          // reverse order, 20 steps; every gradient must come back as the mean over all peers.
          GradSyncOptions go;
          go.bucket_bytes = 4096;
          go.timeout = std::chrono::milliseconds(a.timeout_ms);
          GradientSync gs(p, go);
          std::vector<ParamSpec> params;
          for (uint64_t id = 0; id < 5; ++id) params.push_back({id, DType::f32, 300 + 200 * id, 1});
          must(gs.register_params(params));
          const uint32_t n = p.size();
          for (int step = 0; step < 20; ++step, ++done) {
            std::vector<Tensor> grads;
            for (const auto& ps : params) {
              std::vector<float> v(ps.numel);
              for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(p.rank() * 4 + step + i % 3);
              grads.push_back(Tensor::from(v));
            }
            for (int k = 4; k >= 0; --k) must(gs.submit(static_cast<uint64_t>(k), grads[k]));
            must(gs.sync());
            for (std::size_t k = 0; k < params.size(); ++k)
              for (std::size_t i = 0; i < params[k].numel; ++i) {
                const double want = 4.0 * (n - 1) / 2.0 + step + static_cast<double>(i % 3);
                const double have = grads[k].data_as<float>()[i];
                if (std::abs(have - want) > 1e-4)
                  verify(false, "gradient sync", "param " + std::to_string(k) + " element " + std::to_string(i) +
                                                     ": " + std::to_string(have) + " != " + std::to_string(want));
              }
          }
        } else if (a.scenario == "skip") {
          // The victim peer stops calling after --at-op ops; everyone else must time out, naming it
          // (its own node's peers) or its node (the other nodes).
          // Everyone stays connected for a while after its own error too: a node that left early
          // would turn the others' "never called" into "left".
          struct Linger {
            int64_t ms;
            ~Linger() { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }
          } linger{a.timeout_ms};
          for (uint32_t i = 0; i < a.at_op + 1; ++i, ++done) {
            if (i == a.at_op && p.rank() == static_cast<uint32_t>(a.victim_node)) {
              // Stay connected past everyone's deadline, so the others see a silent node, not a departed one.
              std::this_thread::sleep_for(std::chrono::milliseconds(2 * a.timeout_ms));
              throw Fail{Status(Errc::ok, "skipped")};
            }
            Tensor x = make_input(DType::f32, p.rank(), 100, ReduceOp::sum);
            must(p.all_reduce(x, ReduceOp::sum));
          }
        } else if (a.scenario == "kill" || a.scenario == "freeze") {
          // Ops run until, at op --at-op, the victim node dies (or freezes) while the others are inside it.
          for (uint32_t i = 0;; ++i, ++done) {
            if (i == a.at_op && p.rank() == static_cast<uint32_t>(a.victim_node)) {
              say(me + "VICTIM");
              raise(a.scenario == "kill" ? SIGKILL : SIGSTOP);
            }
            Tensor x = make_input(DType::f32, p.rank(), 50000, ReduceOp::sum);
            must(p.all_reduce(x, ReduceOp::sum));
            if (i > a.at_op + 1000) break;
          }
        } else {
          throw Fail{Status(Errc::invalid_argument, "unknown scenario " + a.scenario)};
        }
        say(me + "OK " + std::to_string(done));
        ok[id] = 1;
      } catch (const Fail& f) {
        say(me + "ERR " + std::string(to_string(f.status.code())) + " " + f.status.message());
        ok[id] = 2;
      }
    });
  for (auto& t : threads) t.join();
  bool all_ok = true;
  for (int v : ok) all_ok = all_ok && v == 1;
  // After a failure, stay connected a moment: the other nodes are still noticing theirs, and a
  // node that left would change what they see ("left" instead of what went wrong).
  if (!all_ok) std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  return all_ok ? 0 : 1;
}
