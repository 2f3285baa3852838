// LocalServerCore: the agreement checks of one op. Every peer gets the same error, the next op works.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <chorus/config.hpp>
#include <chorus/runtime.hpp>
#include "runtime/runtime_impl.hpp"
#include "local_server_fixtures.hpp"
#include "strategies/work_buffer.hpp"
#include "testkit/process.hpp"

namespace chorus {
namespace {

// --- agreement checks: every peer gets the same error, the next op works

TEST_F(CoreTest, ShapeMismatch) {
  mismatch({all_reduce_req(0, 0, 4), all_reduce_req(1, 0, 4), all_reduce_req(2, 0, 5)}, Errc::shape_mismatch,
           {"all_reduce #0", "peer 0 has f32[4] but peer 2 has f32[5]"});
}

TEST_F(CoreTest, ShapeMismatchSameNumelDifferentShape) {
  mismatch({req(0, 0, OpKind::all_reduce, meta(DType::f32, {2, 3})),
            req(1, 0, OpKind::all_reduce, meta(DType::f32, {3, 2})),
            req(2, 0, OpKind::all_reduce, meta(DType::f32, {2, 3}))},
           Errc::shape_mismatch, {"peer 0 has f32[2, 3] but peer 1 has f32[3, 2]"});
}

TEST_F(CoreTest, DtypeMismatch) {
  mismatch({all_reduce_req(0, 0), req(1, 0, OpKind::all_reduce, meta(DType::f64, {4}), meta(DType::f64, {4})),
            all_reduce_req(2, 0)},
           Errc::dtype_mismatch, {"all_reduce #0", "peer 0 has f32[4] but peer 1 has f64[4]"});
}

TEST_F(CoreTest, DtypeMismatchBetweenInputAndOutputOfOnePeer) {
  mismatch({all_reduce_req(0, 0), all_reduce_req(1, 0),
            req(2, 0, OpKind::all_reduce, meta(DType::f32, {4}), meta(DType::i32, {4}))},
           Errc::dtype_mismatch, {"peer 2", "input is f32[4] but output is i32[4]"});
}

TEST_F(CoreTest, OpKindMismatch) {
  mismatch({all_reduce_req(0, 0), all_reduce_req(1, 0), req(2, 0, OpKind::barrier)}, Errc::op_mismatch,
           {"all_reduce #0", "peer 0 called all_reduce but peer 2 called barrier"});
}

TEST_F(CoreTest, ReduceOpMismatch) {
  mismatch({all_reduce_req(0, 0), all_reduce_req(1, 0, 4, ReduceOp::max), all_reduce_req(2, 0)},
           Errc::reduce_op_mismatch, {"peer 0 reduces with sum but peer 1 with max"});
}

TEST_F(CoreTest, RootMismatch) {
  mismatch({req(0, 0, OpKind::reduce, f32(4), f32(4), ReduceOp::sum, 0),
            req(1, 0, OpKind::reduce, f32(4), none(), ReduceOp::sum, 0),
            req(2, 0, OpKind::reduce, f32(4), f32(4), ReduceOp::sum, 2)},
           Errc::root_mismatch, {"reduce #0", "peer 0 names root 0 but peer 2 names root 2"});
}

TEST_F(CoreTest, BroadcastRootMismatch) {
  mismatch({req(0, 0, OpKind::broadcast, f32(4), f32(4), ReduceOp::sum, 0),
            req(1, 0, OpKind::broadcast, f32(4), f32(4), ReduceOp::sum, 1),
            req(2, 0, OpKind::broadcast, none(), f32(4), ReduceOp::sum, 0)},
           Errc::root_mismatch, {"broadcast #0", "peer 0 names root 0 but peer 1 names root 1"});
}

TEST_F(CoreTest, RootOutOfRange) {
  mismatch({req(0, 0, OpKind::gather, f32(4), none(), ReduceOp::sum, 3),
            req(1, 0, OpKind::gather, f32(4), none(), ReduceOp::sum, 3),
            req(2, 0, OpKind::gather, f32(4), none(), ReduceOp::sum, 3)},
           Errc::invalid_argument, {"gather #0", "root 3 is not a peer", "group of 3"});
}

TEST_F(CoreTest, BroadcastByDataWithoutData) {
  mismatch({by_data(0, 0, OpKind::broadcast, none()), by_data(1, 0, OpKind::broadcast, none()),
            by_data(2, 0, OpKind::broadcast, none())},
           Errc::no_data, {"broadcast #0", "no peer supplied the data", "3 peers"});
}

TEST_F(CoreTest, BroadcastByDataFromSeveralPeers) {
  mismatch({by_data(0, 0, OpKind::broadcast, f32(4)), by_data(1, 0, OpKind::broadcast, none()),
            by_data(2, 0, OpKind::broadcast, f32(4))},
           Errc::multiple_data, {"broadcast #0", "peers 0, 2 all supplied data"});
}

TEST_F(CoreTest, ScatterByDataWithoutData) {
  mismatch({by_data(0, 0, OpKind::scatter, none()), by_data(1, 0, OpKind::scatter, none()),
            by_data(2, 0, OpKind::scatter, none())},
           Errc::no_data, {"scatter #0", "no peer supplied the data"});
}

TEST_F(CoreTest, ScatterByDataFromSeveralPeers) {
  mismatch({by_data(0, 0, OpKind::scatter, f32(6)), by_data(1, 0, OpKind::scatter, f32(6)),
            by_data(2, 0, OpKind::scatter, f32(6))},
           Errc::multiple_data, {"scatter #0", "peers 0, 1, 2 all supplied data"});
}

TEST_F(CoreTest, ScatterByDataThatDoesNotSplit) {
  mismatch({by_data(0, 0, OpKind::scatter, none()), by_data(1, 0, OpKind::scatter, f32(7)),
            by_data(2, 0, OpKind::scatter, none())},
           Errc::invalid_argument, {"peer 1", "f32[7]", "3 equal parts"});
}

TEST_F(CoreTest, MixedByRootAndByDataForms) {
  mismatch({req(0, 0, OpKind::broadcast, f32(4), f32(4), ReduceOp::sum, 0),
            by_data(1, 0, OpKind::broadcast, none()), req(2, 0, OpKind::broadcast, none(), f32(4))},
           Errc::op_mismatch, {"peers 0 and 1 mix the by-root and by-data forms of broadcast"});
}

TEST_F(CoreTest, BitwiseReduceOnFloat) {
  for (ReduceOp op : {ReduceOp::band, ReduceOp::bor, ReduceOp::bxor}) {
    core = std::make_unique<LocalServerCore>();
    mismatch({all_reduce_req(0, 0, 4, op), all_reduce_req(1, 0, 4, op), all_reduce_req(2, 0, 4, op)},
             Errc::invalid_argument,
             {"reduce op " + std::string(to_string(op)), "not defined for f32", "integer"});
  }
}

TEST_F(CoreTest, BitwiseReduceOnIntegersIsFine) {
  reg_all(cfg(2));
  auto replies = collective({req(0, 0, OpKind::all_reduce, meta(DType::i32, {4}), {}, ReduceOp::bxor),
                             req(1, 0, OpKind::all_reduce, meta(DType::i32, {4}), {}, ReduceOp::bxor)});
  expect_all_planned(replies);
}

TEST_F(CoreTest, AllReduceOutputOfTheWrongSize) {
  mismatch({all_reduce_req(0, 0), req(1, 0, OpKind::all_reduce, f32(4), f32(3)), all_reduce_req(2, 0)},
           Errc::invalid_argument, {"peer 1", "output f32[3] does not match input f32[4]"});
}

TEST_F(CoreTest, AllGatherOutputTooSmall) {
  mismatch({req(0, 0, OpKind::all_gather, f32(4), f32(12)), req(1, 0, OpKind::all_gather, f32(4), f32(8)),
            req(2, 0, OpKind::all_gather, f32(4), f32(12))},
           Errc::invalid_argument, {"all_gather #0", "peer 1", "output f32[8] must hold 3 x 4"});
}

TEST_F(CoreTest, AllGatherWithoutOutput) {
  mismatch({req(0, 0, OpKind::all_gather, f32(4), f32(12)), req(1, 0, OpKind::all_gather, f32(4), f32(12)),
            req(2, 0, OpKind::all_gather, f32(4), none())},
           Errc::invalid_argument, {"peer 2", "output buffer is missing"});
}

TEST_F(CoreTest, ReduceScatterInputNotNTimesOutput) {
  mismatch({req(0, 0, OpKind::reduce_scatter, f32(12), f32(4)), req(1, 0, OpKind::reduce_scatter, f32(12), f32(4)),
            req(2, 0, OpKind::reduce_scatter, f32(12), f32(5))},
           Errc::invalid_argument, {"reduce_scatter #0", "peer 2", "input f32[12] must hold 3 x output f32[5]"});
}

TEST_F(CoreTest, AllToAllNotDivisible) {
  mismatch({req(0, 0, OpKind::all_to_all, f32(7), f32(7)), req(1, 0, OpKind::all_to_all, f32(7), f32(7)),
            req(2, 0, OpKind::all_to_all, f32(7), f32(7))},
           Errc::invalid_argument, {"peer 0", "all_to_all input f32[7] and output f32[7]", "divisible by 3"});
}

TEST_F(CoreTest, GatherRootOutputTooSmall) {
  mismatch({req(0, 0, OpKind::gather, f32(4), none(), ReduceOp::sum, 1),
            req(1, 0, OpKind::gather, f32(4), f32(11), ReduceOp::sum, 1),
            req(2, 0, OpKind::gather, f32(4), none(), ReduceOp::sum, 1)},
           Errc::invalid_argument, {"peer 1", "gather output on the root f32[11] must hold 3 x 4"});
}

TEST_F(CoreTest, ScatterRootInputTooSmall) {
  mismatch({req(0, 0, OpKind::scatter, f32(8), f32(3), ReduceOp::sum, 0),
            req(1, 0, OpKind::scatter, none(), f32(3), ReduceOp::sum, 0),
            req(2, 0, OpKind::scatter, none(), f32(3), ReduceOp::sum, 0)},
           Errc::invalid_argument, {"peer 0", "scatter input on the root f32[8] must hold 3 x output f32[3]"});
}

TEST_F(CoreTest, ReduceWithoutInput) {
  mismatch({all_reduce_req(0, 0), req(1, 0, OpKind::all_reduce, none(), f32(4)), all_reduce_req(2, 0)},
           Errc::invalid_argument, {"peer 1", "input buffer is missing"});
}

TEST_F(CoreTest, BroadcastReceiverWithoutBuffer) {
  mismatch({req(0, 0, OpKind::broadcast, f32(4), f32(4)), req(1, 0, OpKind::broadcast, none(), none()),
            req(2, 0, OpKind::broadcast, none(), f32(4))},
           Errc::invalid_argument, {"peer 1", "broadcast buffer is missing"});
}

TEST_F(CoreTest, EveryFailureAtLaunchIsReportedOnceAndTheTimerIsStale) {
  reg_all(cfg(2));
  auto replies = collective({all_reduce_req(0, 0, 4), all_reduce_req(1, 0, 5)});
  expect_all_failed(replies, Errc::shape_mismatch, {"peer 0 has f32[4] but peer 1 has f32[5]"});
  ASSERT_NE(replies[0]->timer, 0u);
  EXPECT_EQ(replies[1]->timer, replies[0]->timer) << "one timer per op";
  core->on_timeout(replies[0]->timer);  // the op is over: a waiter's late expiry is stale and harmless
  EXPECT_EQ(replies[0]->status.code(), Errc::shape_mismatch);
  expect_next_all_reduce_works(2, 1);
}

} // namespace
} // namespace chorus
