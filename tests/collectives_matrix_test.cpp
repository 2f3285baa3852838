// Every collective end to end (collective_cases.hpp): the full matrix of op x dtype x reduce op x
// peer count x strategy x element count, large messages above the auto threshold, and long runs
// of mixed ops with peers drifting apart.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "collective_cases.hpp"

namespace chorus {
namespace {

using namespace testing;

// ---- the full matrix -----------------------------------------------------------------------

constexpr const char* kStrategies[] = {"auto", "centralized", "tree:2", "tree:3", "ring", "dbtree", "direct"};

class Matrix : public ::testing::TestWithParam<std::tuple<uint32_t, const char*>> {};

TEST_P(Matrix, EveryOpDtypeReduceOpAndCount) {
  const auto [n, strategy] = GetParam();
  Runtime rt;
  Reporter rep;
  const auto cases = matrix_cases(n);
  run_cases(rt, n, strategy, cases, rep);
  rep.expect_clean();
  RecordProperty("ops", static_cast<int>(cases.size()));
}

INSTANTIATE_TEST_SUITE_P(
    Collectives, Matrix,
    ::testing::Combine(::testing::Values(1u, 2u, 3u, 4u, 5u, 8u), ::testing::ValuesIn(kStrategies)),
    [](const auto& info) {
      return "n" + std::to_string(std::get<0>(info.param)) + "_" + strategy_id(std::get<1>(info.param));
    });

// ---- large messages: auto switches to the ring, pipelined/chunked schedules ----------------------

class Large : public ::testing::TestWithParam<const char*> {};

TEST_P(Large, EveryOpAboveTheAutoThreshold) {
  const char* strategy = GetParam();
  Runtime rt;
  Reporter rep;
  for (uint32_t n : {3u, 8u}) {
    std::vector<Case> cases = {
        {K::all_reduce_inplace, DType::f32, ReduceOp::sum, 70000},   // 280 KB >= 256 KiB
        {K::all_reduce_out, DType::bf16, ReduceOp::max, 140001},
        {K::all_reduce_inplace, DType::i64, ReduceOp::bxor, 40000},
        {K::all_reduce_out, DType::f16, ReduceOp::avg, 131072},
        {K::reduce_out, DType::f64, ReduceOp::prod, 33000},
        {K::reduce_inplace, DType::u8, ReduceOp::band, 300000},
        {K::reduce_scatter, DType::f16, ReduceOp::sum, 20011},
        {K::reduce_scatter, DType::i32, ReduceOp::min, 9000},
        {K::broadcast_root, DType::u8, ReduceOp::sum, 300007},
        {K::broadcast_data, DType::f64, ReduceOp::sum, 40000},
        {K::all_gather, DType::i8, ReduceOp::sum, 40000},
        {K::gather, DType::f32, ReduceOp::sum, 20000},
        {K::scatter_root, DType::i32, ReduceOp::sum, 70000},
        {K::scatter_data, DType::bf16, ReduceOp::sum, 30000},
        {K::all_to_all, DType::f16, ReduceOp::sum, 20000},
        {K::send_recv, DType::f32, ReduceOp::sum, 70000},
    };
    number(cases, n);
    run_cases(rt, n, strategy, cases, rep);
  }
  rep.expect_clean();
}

INSTANTIATE_TEST_SUITE_P(Collectives, Large, ::testing::ValuesIn(kStrategies),
                         [](const auto& info) { return strategy_id(info.param); });

// ---- many consecutive mixed ops, peers drifting apart ---------------------------------------------

class Mixed : public ::testing::TestWithParam<const char*> {};

TEST_P(Mixed, TwoHundredFortyConsecutiveOpsStayApart) {
  const char* strategy = GetParam();
  Runtime rt;  // also re-registers a second collective on the same runtime after the first finishes
  Reporter rep;
  constexpr K kinds[] = {K::all_reduce_inplace, K::broadcast_root, K::reduce_out, K::all_gather,
                         K::send_recv, K::reduce_scatter, K::all_to_all, K::gather, K::barrier,
                         K::scatter_root, K::all_reduce_out, K::broadcast_data, K::reduce_inplace,
                         K::scatter_data};
  constexpr std::size_t counts[] = {0, 1, 3, 7, 64, 1000, 1003};
  for (uint32_t n : {5u, 4u}) {
    std::vector<Case> cases;
    for (std::size_t i = 0; i < 240; ++i) {
      Case c{kinds[i % std::size(kinds)], all_dtypes[i % 8], ReduceOp::sum, counts[i % 7]};
      // Same kind and shape back to back with different data: a mixed-up op would be visible.
      if (i % 17 == 5 || i % 17 == 6) c = Case{K::all_reduce_inplace, DType::i32, ReduceOp::sum, 64};
      if (reduces(c.kind)) {
        const ReduceOp ops[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max,
                                ReduceOp::avg, ReduceOp::band, ReduceOp::bor, ReduceOp::bxor};
        c.op = ops[(i / 3) % 8];
        if (!reduce_op_valid(c.dt, c.op)) c.op = ReduceOp::max;
      }
      if (c.kind == K::send_recv) c.count = std::min<std::size_t>(c.count, 64);
      cases.push_back(c);
    }
    number(cases, n);
    run_cases(rt, n, strategy, cases, rep, /*jitter=*/true);
  }
  rep.expect_clean();
}

INSTANTIATE_TEST_SUITE_P(Collectives, Mixed, ::testing::ValuesIn(kStrategies),
                         [](const auto& info) { return strategy_id(info.param); });

} // namespace
} // namespace chorus
