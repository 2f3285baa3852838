// The case machinery of the end-to-end collective tests (collectives_matrix_test,
// collectives_in_place_test, barrier_test): every collective through the blocking Peer API, real
// threads, one per peer, on one Runtime. Every result is compared element by element with
// testkit/reference.hpp (double / 64-bit integer arithmetic, independent of the library's
// kernels), on every peer that has a result; buffers that must not change (inputs, non-root
// outputs) are checked too.
//
// Speed: each test reuses one Runtime and runs a whole list of cases inside one run_peers call
// (every peer walks the same list in the same order), so threads are spawned once per
// configuration, not once per op. A case never returns early on a failure: a peer that skipped
// an op would leave the others waiting for it until the timeout.
//
// Built once for every suite (tests/CMakeLists.txt): collective_cases.cpp holds the data, the
// references and the case lists, collective_case_run.cpp one case from one peer's side.
#pragma once
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <chorus/chorus.hpp>
#include "testkit/reference.hpp"

namespace chorus::testing {

using Bytes = std::vector<unsigned char>;

// ---- deterministic data ----------------------------------------------------------------------

inline uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
inline uint64_t h3(uint64_t seed, uint64_t stream, uint64_t i) {
  return mix(seed ^ mix(stream * 0x100000001b3ull + mix(i)));
}

// Arbitrary bytes (any bit pattern, NaNs included): data-moving ops must copy them exactly.
void fill_bytes(uint64_t seed, uint64_t stream, void* dst, std::size_t nbytes);
Bytes bytes_of(uint64_t seed, uint64_t stream, std::size_t nbytes);
inline constexpr uint64_t kGarbage = 1000003;  // stream offset for "must stay unchanged" prefills

// ---- cases -----------------------------------------------------------------------------------

enum class K {
  all_reduce_inplace, all_reduce_out, reduce_inplace, reduce_out, reduce_scatter,
  broadcast_root, broadcast_data, all_gather, gather, scatter_root, scatter_data, all_to_all,
  barrier, send_recv,
  // In place through views: the input is a borrowed view of my block of the output (all_gather,
  // gather on the root) or the output a view of my block of the input (reduce_scatter, scatter on
  // the root); all_reduce/reduce pass the same tensor as in and out.
  all_gather_view, gather_view, reduce_scatter_view, scatter_view, all_reduce_same, reduce_same
};
inline constexpr K kReduceKinds[] = {K::all_reduce_inplace, K::all_reduce_out, K::reduce_inplace,
                              K::reduce_out, K::reduce_scatter};
inline constexpr K kMoveKinds[] = {K::broadcast_root, K::broadcast_data, K::all_gather, K::gather,
                            K::scatter_root, K::scatter_data, K::all_to_all};

const char* kind_name(K k);
inline bool reduces(K k) {
  return static_cast<int>(k) <= static_cast<int>(K::reduce_scatter) || k == K::reduce_scatter_view ||
         k == K::all_reduce_same || k == K::reduce_same;
}

struct Case {
  K kind;
  DType dt = DType::f32;
  ReduceOp op = ReduceOp::sum;
  std::size_t count = 0;  // per-peer count in the sense of schedule.hpp (block size for n-blocked ops)
  uint32_t root = 0;
  uint64_t seed = 0;
  int variant = 0;        // shape form / borrowed storage / what non-roots pass
  std::size_t index = 0;  // position in the list
  std::string describe(uint32_t n, const char* strategy) const {
    std::string s = "case #" + std::to_string(index) + " " + kind_name(kind) + " " +
                    std::string(to_string(dt));
    if (reduces(kind)) s += " " + std::string(to_string(op));
    s += " count=" + std::to_string(count) + " root=" + std::to_string(root) + " variant=" +
         std::to_string(variant) + " n=" + std::to_string(n) + " strategy=" + strategy;
    return s;
  }
};


// Counts failures across peer threads and prints only the first few.
struct Reporter {
  std::atomic<int> failures{0};
  static constexpr int kShown = 30;
  void fail(const std::string& msg) {
    if (++failures <= kShown) ADD_FAILURE() << msg;
  }
  void expect_clean() {
    EXPECT_EQ(failures.load(), 0) << "(only the first " << kShown << " failures are printed)";
  }
};

// The strategies every suite runs, and each one's name in a test name.
inline constexpr const char* kStrategies[] = {"auto", "centralized", "tree:2", "tree:3", "ring", "dbtree", "direct"};
std::string strategy_id(const char* s);

// Numbers `cases` for n peers: index, seed, root and variant.
void number(std::vector<Case>& cases, uint32_t n);
// The full matrix for one (n, strategy): every kind x dtype x valid reduce op x count.
std::vector<Case> matrix_cases(uint32_t n);

// Runs `cases` on n peers with `strategy`; `jitter` makes peers drift apart between ops.
void run_cases(Runtime& rt, uint32_t n, const char* strategy, const std::vector<Case>& cases,
               Reporter& rep, bool jitter = false);

// ---- references (collective_cases.cpp), for collective_case_run.cpp --------------------------

// Peer p's input of a reduction case: `numel` elements.
Bytes reduce_input(const Case& c, uint32_t p, std::size_t numel);
// Elements [first, first + cnt) of the reduction over n peers.
ref::Expected expect_reduction(const Case& c, uint32_t n, std::size_t first, std::size_t cnt);
// Exactly these bytes.
ref::Expected exact(DType dt, Bytes b);

} // namespace chorus::testing
