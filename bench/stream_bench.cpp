// chorus-stream-bench: what ordering GPU ops in a CUDA stream (OpOptions::stream) buys, logical
// peers as threads of one process on GPU 0, each with a stream of its own, all-reduces (f32, avg)
// of --bytes each:
//  1. Enqueue: what one stream-ordered all_reduce_async costs the calling thread (median of the
//     calls of a run of --ops).
//  2. In a row: --ops stream-ordered all-reduces, then the stream waited once, against the same
//     ops blocking, each after waiting for the stream (what a GPU op costs without a stream: the
//     caller must see the stream's earlier work done first). Ratio = blocking / stream-ordered.
// Every result is checked (avg of 1, 2, ... peers keeps its value). Times: the median over --reps
// of peer 0's wall time between barriers. Without a GPU it says so and exits 0.
//
// Usage: chorus-stream-bench [--peers N] [--ops K] [--bytes B] [--reps R]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <chorus/chorus.hpp>
#include <chorus/gpu.hpp>
#include "cuda/user_streams.hpp"
#include "timing.hpp"

using namespace chorus;
using chorus::bench::Clock;
using chorus::bench::median;
using chorus::bench::us_since;

namespace {

struct Opts {
  uint32_t peers = 2;
  int ops = 1000;
  std::size_t bytes = 1 << 10;
  int reps = 7;
};

struct Timings {
  std::vector<double> enqueue_us, ordered_us, blocking_us;
  long wrong = 0;
  std::string error;
};

std::mutex g_error_mu;
void fail(Timings& t, const std::string& what, const Status& s) {
  std::lock_guard<std::mutex> lk(g_error_mu);
  if (t.error.empty()) t.error = what + ": " + s.to_string();
}

void run_peer(Peer& peer, const Opts& o, Timings& res) {
  const bool lead = peer.rank() == 0;
  const std::size_t count = o.bytes / sizeof(float);
  const float want = (static_cast<float>(o.peers) + 1) / 2;  // avg of 1..peers
  auto stream = gpu::make_stream(0);
  if (!stream) return fail(res, "make_stream", stream.status());
  Tensor t = Tensor::from(std::vector<float>(count, static_cast<float>(peer.rank() + 1))).to(Device::cuda(0));
  auto check = [&] {
    auto v = t.to(Device::cpu()).to_vector<float>();
    if (lead) res.wrong += std::count_if(v.begin(), v.end(), [&](float x) { return x != want; });
  };
  std::vector<Work> works(o.ops);
  std::vector<double> calls(o.ops);
  for (int rep = 0; rep < o.reps; ++rep) {
    (void)peer.barrier();
    auto t0 = Clock::now();
    for (int i = 0; i < o.ops; ++i) {
      auto c0 = Clock::now();
      works[i] = peer.all_reduce_async(t, ReduceOp::avg, OpOptions{.stream = *stream});
      calls[i] = us_since(c0);
    }
    if (Status s = gpu::synchronize_stream(*stream); !s) return fail(res, "synchronize_stream", s);
    const double ordered = us_since(t0);
    for (auto& w : works)
      if (Status s = w.wait(); !s) return fail(res, "stream-ordered all_reduce", s);
    check();
    (void)peer.barrier();
    t0 = Clock::now();
    for (int i = 0; i < o.ops; ++i) {
      if (Status s = gpu::synchronize_stream(*stream); !s) return fail(res, "synchronize_stream", s);
      if (Status s = peer.all_reduce(t, ReduceOp::avg); !s) return fail(res, "blocking all_reduce", s);
    }
    const double blocking = us_since(t0);
    check();
    if (lead) {
      res.enqueue_us.push_back(median(calls));
      res.ordered_us.push_back(ordered);
      res.blocking_us.push_back(blocking);
    }
  }
  gpu::destroy_stream(*stream);
}

} // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Opts o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    long v = std::strtol(argv[i + 1], nullptr, 10);
    if (a == "--peers") o.peers = static_cast<uint32_t>(v);
    else if (a == "--ops") o.ops = static_cast<int>(v);
    else if (a == "--bytes") o.bytes = static_cast<std::size_t>(v);
    else if (a == "--reps") o.reps = static_cast<int>(v);
    else {
      std::fprintf(stderr, "usage: chorus-stream-bench [--peers N] [--ops K] [--bytes B] [--reps R]\n");
      return 2;
    }
  }
  if (gpu::device_count() < 1) {
    std::printf("# chorus-stream-bench: no CUDA device here (%s); nothing measured\n",
                gpu::built_with_cuda() ? "none visible" : "built without CUDA");
    return 0;
  }
  Runtime rt;
  Config cfg;
  cfg.num_devices = o.peers;
  cfg.timeout = std::chrono::seconds(60);
  Timings res;
  std::vector<std::thread> threads;
  for (uint32_t p = 0; p < o.peers; ++p)
    threads.emplace_back([&, p] {
      auto peer = rt.register_peer(p, cfg);
      if (!peer) return fail(res, "register_peer", peer.status());
      run_peer(*peer, o, res);
      (void)peer->finish();
    });
  for (auto& th : threads) th.join();
  if (!res.error.empty()) {
    std::printf("# chorus-stream-bench: %s\n", res.error.c_str());
    return 1;
  }
  const double ordered = median(res.ordered_us), blocking = median(res.blocking_us);
  std::printf("# chorus-stream-bench: %u logical peers on GPU 0 (%s), all_reduce f32 avg of %zu B, %d ops a run, "
              "median of %d runs\n",
              o.peers, gpu::device_name(0).c_str(), o.bytes, o.ops, o.reps);
  std::printf("enqueue (host cost of one stream-ordered call): %.2f us  (target <= 5)\n", median(res.enqueue_us));
  std::printf("in a row: stream-ordered %.1f us (%.2f us/op), blocking %.1f us (%.2f us/op): %.2fx faster  "
              "(target >= 2)\n",
              ordered, ordered / o.ops, blocking, blocking / o.ops, blocking / ordered);
  std::printf("wrong elements: %ld\n", res.wrong);
  return res.wrong == 0 ? 0 : 1;
}
