// chorus-work-bench: what non-blocking ops (Peer::*_async, chorus/work.hpp) buy, peers as threads
// of one process, or as processes under a launcher (Config::from_env: then each process hosts
// the launcher's peers, e.g. `chorus-run -n 2 chorus-work-bench`, and rank 0 reports).
//  1. In flight: K all-reduces of B bytes each (f32, sum), issued one after another (each waited
//     before the next) against all K issued at once and then waited. Ratio = at once / one by one.
//  2. Overlap: an all-reduce of O bytes issued non-blocking beside a compute loop calibrated to
//     the op's own time, against the longer of the two alone. Ratio = together / max(op, compute).
//  3. Coalesced: K all-reduces of C bytes each one after another, against one
//     all_reduce_coalesced of the K tensors. Ratio = coalesced / one by one.
//  4. Tagged send/recv: each peer sends K messages of C bytes to the next peer and receives K from
//     the one before, all in flight at once, then waited; with one tag for all, against a new tag
//     for each message (as programs that tag each message by its step do: each (direction, peer,
//     tag) is a lane of its own, with a thread while it has work). Ratio = new tags / one tag.
// Every result is checked. Times: the median over --reps of peer 0's wall time between barriers.
//
// Usage: chorus-work-bench [--peers N] [--ops K] [--bytes B] [--overlap-bytes O] [--coalesce-bytes C] [--reps R]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <chorus/chorus.hpp>
#include "timing.hpp"

using namespace chorus;
using chorus::bench::Clock;
using chorus::bench::median;
using chorus::bench::us_since;

namespace {

struct Opts {
  uint32_t peers = 2;
  int ops = 64;
  std::size_t bytes = 64 << 10;
  std::size_t overlap_bytes = 64 << 20;
  std::size_t coalesce_bytes = 1 << 10;
  int reps = 15;
};

volatile double g_sink;
// Busy work of `iters` steps on this thread (the "compute" of a training step).
void compute(long iters) {
  double x = 1.0;
  for (long i = 0; i < iters; ++i) x = x * 1.0000001 + 1e-9;
  g_sink = x;
}

struct Timings {
  double one_by_one = 0, at_once = 0, op_alone = 0, compute_alone = 0, together = 0;
  double small_one_by_one = 0, coalesced = 0;
  double one_tag = 0, new_tags = 0;
  long wrong = 0;
};

void run_peer(Peer& peer, const Opts& o, Timings& res, long compute_iters_per_us) {
  const bool lead = peer.rank() == 0;
  const std::size_t count = o.bytes / sizeof(float);
  const float n = static_cast<float>(peer.size());
  // K tensors of `c` floats, filled with ones before an op and holding n after it.
  auto tensors = [&](std::size_t c) {
    std::vector<Tensor> ts;
    for (int i = 0; i < o.ops; ++i) ts.push_back(Tensor::zeros(DType::f32, {static_cast<int64_t>(c)}));
    return ts;
  };
  auto fill = [](std::vector<Tensor>& ts) {
    for (auto& t : ts) std::fill_n(t.data_as<float>(), t.numel(), 1.0f);
  };
  auto check_all = [&](const std::vector<Tensor>& ts) {
    for (const auto& t : ts)
      for (std::size_t j = 0; j < t.numel(); ++j)
        if (t.data_as<float>()[j] != n) ++res.wrong;
  };
  std::vector<Tensor> bufs = tensors(count);
  std::vector<double> seq, par;
  for (int r = 0; r < o.reps; ++r) {
    fill(bufs);
    (void)peer.barrier();
    auto t0 = Clock::now();
    for (auto& t : bufs) (void)peer.all_reduce(t, ReduceOp::sum);
    seq.push_back(us_since(t0));
    if (lead) check_all(bufs);
    fill(bufs);
    (void)peer.barrier();
    t0 = Clock::now();
    std::vector<Work> w;
    w.reserve(bufs.size());
    for (auto& t : bufs) w.push_back(peer.all_reduce_async(t, ReduceOp::sum));
    for (auto& x : w) (void)x.wait();
    par.push_back(us_since(t0));
    if (lead) check_all(bufs);
  }
  // Coalesced: the same number of small tensors.
  std::vector<Tensor> small = tensors(o.coalesce_bytes / sizeof(float));
  std::vector<double> sone, scoal;
  for (int r = 0; r < o.reps; ++r) {
    fill(small);
    (void)peer.barrier();
    auto t0 = Clock::now();
    for (auto& t : small) (void)peer.all_reduce(t, ReduceOp::sum);
    sone.push_back(us_since(t0));
    if (lead) check_all(small);
    fill(small);
    (void)peer.barrier();
    t0 = Clock::now();
    (void)peer.all_reduce_coalesced(small, ReduceOp::sum);
    scoal.push_back(us_since(t0));
    if (lead) check_all(small);
  }
  // Tagged send/recv: K messages each way, one tag for all or a tag never used before for each.
  const uint32_t next = (peer.rank() + 1) % peer.size(), prev = (peer.rank() + peer.size() - 1) % peer.size();
  std::vector<Tensor> out = tensors(o.coalesce_bytes / sizeof(float)), in = tensors(o.coalesce_bytes / sizeof(float));
  uint64_t fresh = 1;
  std::vector<double> one_tag, new_tags;
  for (int r = 0; r < o.reps; ++r)
    for (bool each_new : {false, true}) {
      for (int i = 0; i < o.ops; ++i) std::fill_n(out[i].data_as<float>(), out[i].numel(), float(peer.rank() * 1000 + i));
      (void)peer.barrier();
      auto t0 = Clock::now();
      std::vector<Work> w;
      w.reserve(2 * o.ops);
      for (int i = 0; i < o.ops; ++i) {
        const uint64_t tag = each_new ? fresh + i : 0;
        w.push_back(peer.recv_async(in[i], prev, tag));
        w.push_back(peer.send_async(out[i], next, tag));
      }
      long failed = 0;
      for (auto& x : w) failed += x.wait().is_ok() ? 0 : 1;
      (each_new ? new_tags : one_tag).push_back(us_since(t0));
      if (each_new) fresh += o.ops;
      if (lead) {
        res.wrong += failed;
        for (int i = 0; i < o.ops; ++i)
          if (in[i].data_as<float>()[0] != float(prev * 1000 + i)) ++res.wrong;
      }
    }
  // Overlap.
  const std::size_t ocount = o.overlap_bytes / sizeof(float);
  Tensor big = Tensor::zeros(DType::f32, {static_cast<int64_t>(ocount)});
  std::vector<double> alone, comp, both;
  for (int r = 0; r < o.reps; ++r) {
    std::fill_n(big.data_as<float>(), ocount, 1.0f);
    (void)peer.barrier();
    auto t0 = Clock::now();
    (void)peer.all_reduce(big, ReduceOp::sum);
    alone.push_back(us_since(t0));
  }
  const double op_us = median(alone);
  const long iters = static_cast<long>(op_us * compute_iters_per_us);
  for (int r = 0; r < o.reps; ++r) {
    (void)peer.barrier();
    auto t0 = Clock::now();
    compute(iters);
    comp.push_back(us_since(t0));
    std::fill_n(big.data_as<float>(), ocount, 1.0f);
    (void)peer.barrier();
    t0 = Clock::now();
    Work w = peer.all_reduce_async(big, ReduceOp::sum);
    compute(iters);
    (void)w.wait();
    both.push_back(us_since(t0));
    if (lead)
      for (std::size_t j = 0; j < ocount; j += 997)
        if (big.data_as<float>()[j] != n) ++res.wrong;
  }
  if (lead) {
    res.one_by_one = median(seq);
    res.at_once = median(par);
    res.op_alone = op_us;
    res.compute_alone = median(comp);
    res.together = median(both);
    res.small_one_by_one = median(sone);
    res.coalesced = median(scoal);
    res.one_tag = median(one_tag);
    res.new_tags = median(new_tags);
  }
}

} // namespace

int main(int argc, char** argv) {
  Opts o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i];
    const long v = std::strtol(argv[i + 1], nullptr, 10);
    if (v <= 0) { std::fprintf(stderr, "%s: need a positive number\n", f.c_str()); return 2; }
    if (f == "--peers") o.peers = static_cast<uint32_t>(v);
    else if (f == "--ops") o.ops = static_cast<int>(v);
    else if (f == "--bytes") o.bytes = static_cast<std::size_t>(v);
    else if (f == "--overlap-bytes") o.overlap_bytes = static_cast<std::size_t>(v);
    else if (f == "--coalesce-bytes") o.coalesce_bytes = static_cast<std::size_t>(v);
    else if (f == "--reps") o.reps = static_cast<int>(v);
    else { std::fprintf(stderr, "usage: chorus-work-bench [--peers N] [--ops K] [--bytes B] [--overlap-bytes O] [--coalesce-bytes C] [--reps R]\n"); return 2; }
  }
  // The compute loop's speed on this machine (steps per microsecond).
  auto t0 = Clock::now();
  compute(50'000'000);
  const long per_us = static_cast<long>(50'000'000 / std::max(1.0, us_since(t0)));

  auto env = Config::from_env();
  if (!env) { std::fprintf(stderr, "chorus-work-bench: %s\n", env.status().to_string().c_str()); return 2; }
  Config cfg = *env;
  const bool launched = cfg.num_nodes > 1;  // else one process, whose peers --peers says
  if (!launched) cfg.num_devices = o.peers;
  Runtime rt;
  Timings res;
  uint32_t world = 0;
  bool reports = false;
  std::vector<std::thread> threads;
  for (uint32_t p = 0; p < cfg.num_devices; ++p)
    threads.emplace_back([&, p] {
      auto peer = rt.register_peer(p, cfg);
      if (!peer) { std::fprintf(stderr, "register: %s\n", peer.status().to_string().c_str()); std::exit(1); }
      if (peer->rank() == 0) {
        world = peer->size();
        reports = true;
      }
      run_peer(*peer, o, res, per_us);
      (void)peer->finish();
    });
  for (auto& t : threads) t.join();
  if (!reports) return res.wrong == 0 ? 0 : 1;  // another process's rank 0 reports
  if (launched)
    std::printf("# chorus-work-bench: %u peers in %u processes (%u here), median of %d reps\n", world, cfg.num_nodes,
                cfg.num_devices, o.reps);
  else
    std::printf("# chorus-work-bench: %u peers (threads), median of %d reps\n", world, o.reps);
  std::printf("in flight: %d x %zu B all_reduce: one by one %.1f us, all at once %.1f us, ratio %.2f\n", o.ops,
              o.bytes, res.one_by_one, res.at_once, res.at_once / res.one_by_one);
  const double longer = std::max(res.op_alone, res.compute_alone);
  std::printf("overlap: %zu B all_reduce %.1f us, compute %.1f us, together %.1f us, ratio %.2f\n", o.overlap_bytes,
              res.op_alone, res.compute_alone, res.together, res.together / longer);
  std::printf("coalesced: %d x %zu B all_reduce: one by one %.1f us, coalesced %.1f us, ratio %.2f\n", o.ops,
              o.coalesce_bytes, res.small_one_by_one, res.coalesced, res.coalesced / res.small_one_by_one);
  std::printf("tagged send/recv: %d x %zu B each way: one tag %.1f us, a new tag each %.1f us, ratio %.2f\n", o.ops,
              o.coalesce_bytes, res.one_tag, res.new_tags, res.new_tags / res.one_tag);
  std::printf("#wrong %ld\n", res.wrong);
  return res.wrong == 0 ? 0 : 1;
}
