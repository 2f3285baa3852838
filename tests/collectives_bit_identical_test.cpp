// Floating all_reduce leaves bit-identical results on every peer, within the rounding error of
// the double reference, for every strategy.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "collective_cases.hpp"
#include "peer_harness.hpp"

namespace chorus {
namespace {

using namespace testing;

// ---- floating all_reduce is bit-identical on every peer --------------------------------------------

uint64_t fnv(const void* data, std::size_t n) {
  const auto* b = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

// Random (non-exact) inputs, rounded to the dtype when written.
double random_value(ReduceOp op, uint64_t seed, uint32_t p, std::size_t e) {
  const uint64_t h = h3(seed, p, e);
  const double u = static_cast<double>(h >> 11) * 0x1p-53;  // [0, 1)
  const double sign = (h & 1) ? -1.0 : 1.0;
  switch (op) {
    case ReduceOp::prod: return 0.9 + 0.2 * u;
    case ReduceOp::min: case ReduceOp::max: return sign * 100 * u;
    default: return sign * (0.5 + 1.5 * u);  // sum, avg
  }
}
double stored(DType dt, double v) {
  unsigned char b[8];
  ref::set_f(dt, b, 0, v);
  return ref::get_f(dt, b, 0);
}

class BitIdentical : public ::testing::TestWithParam<const char*> {};

TEST_P(BitIdentical, FloatingAllReduceAgreesAcrossPeers) {
  const char* strategy = GetParam();
  Runtime rt;
  Reporter rep;
  const DType dts[] = {DType::f16, DType::bf16, DType::f32, DType::f64};
  const ReduceOp ops[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::avg, ReduceOp::min, ReduceOp::max};
  const std::size_t counts[] = {1, 7, 1003, 70000};
  for (uint32_t n : {3u, 5u, 8u}) {  // n = 2 is symmetric by commutativity alone
    struct C { DType dt; ReduceOp op; std::size_t count; uint64_t seed; };
    std::vector<C> cases;
    for (std::size_t count : counts)
      for (DType dt : dts)
        for (ReduceOp op : ops) cases.push_back({dt, op, count, mix(cases.size() * 31 + n)});
    std::vector<std::vector<uint64_t>> hashes(cases.size(), std::vector<uint64_t>(n));
    harness::run_peers(rt, harness::config_for(n, strategy), [&](Peer& peer) {
      const uint32_t p = peer.id();
      for (std::size_t i = 0; i < cases.size(); ++i) {
        const C& c = cases[i];
        const std::string what = "all_reduce " + std::string(to_string(c.dt)) + " " +
                                 std::string(to_string(c.op)) + " count=" + std::to_string(c.count) +
                                 " n=" + std::to_string(n) + " strategy=" + strategy + ", peer " + std::to_string(p);
        Tensor in = Tensor::zeros(c.dt, {static_cast<int64_t>(c.count)});
        for (std::size_t e = 0; e < c.count; ++e) ref::set_f(c.dt, in.data(), e, random_value(c.op, c.seed, p, e));
        Tensor out = Tensor::zeros(c.dt, {static_cast<int64_t>(c.count)});
        Status st = (i % 2) ? peer.all_reduce(in, out, c.op) : peer.all_reduce(in, c.op);
        if (!st) { rep.fail(what + ": returned " + st.to_string()); continue; }
        const Tensor& res = (i % 2) ? out : in;
        hashes[i][p] = fnv(res.data(), res.nbytes());
        // Against the double reference, on a sample of the elements: within the rounding error of
        // n - 1 combinations (+ the avg division) of the dtype.
        const double u = ref::unit_roundoff(c.dt);
        std::vector<double> v(n);
        for (std::size_t e = 0; e < c.count; e = (e < 1003 ? e + 1 : e + 61)) {
          double scale = 0;
          for (uint32_t q = 0; q < n; ++q) {
            v[q] = stored(c.dt, random_value(c.op, c.seed, q, e));
            scale += std::fabs(v[q]);
          }
          const double want = ref::reduce_f(c.op, v.data(), n);
          const double got = ref::get_f(c.dt, res.data(), e);
          double tol = 0;
          if (c.op == ReduceOp::sum) tol = (n + 1) * u * scale;
          else if (c.op == ReduceOp::avg) tol = (n + 2) * u * scale / n;
          else if (c.op == ReduceOp::prod) tol = (n + 1) * u * std::fabs(want);
          if (!(std::fabs(got - want) <= tol)) {
            rep.fail(what + ": element " + std::to_string(e) + " = " + std::to_string(got) + ", reference " +
                     std::to_string(want) + " (tolerance " + std::to_string(tol) + ")");
            break;
          }
        }
      }
    });
    for (std::size_t i = 0; i < cases.size(); ++i)
      for (uint32_t q = 1; q < n; ++q)
        if (hashes[i][q] != hashes[i][0]) {
          rep.fail("all_reduce " + std::string(to_string(cases[i].dt)) + " " + std::string(to_string(cases[i].op)) +
                   " count=" + std::to_string(cases[i].count) + " n=" + std::to_string(n) + " strategy=" +
                   strategy + ": peer " + std::to_string(q) + "'s result differs bitwise from peer 0's");
          break;
        }
  }
  rep.expect_clean();
}

INSTANTIATE_TEST_SUITE_P(Collectives, BitIdentical, ::testing::ValuesIn(kStrategies),
                         [](const auto& info) { return strategy_id(info.param); });

} // namespace
} // namespace chorus
