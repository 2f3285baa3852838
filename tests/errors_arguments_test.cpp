// Error paths of an op's arguments: peers that disagree (shape, dtype, op, root, by-data forms),
// bitwise ops on floats, buffers of the wrong size, and bad send/recv arguments. Every error has
// its own Errc and a message that names the peers and values involved; on a mismatch every peer
// that joined the op gets the same Status, and the next op (a correct all_reduce, checked for its
// values) works normally afterwards.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <chorus/chorus.hpp>
#include "error_checks.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;
using namespace testing;

// ---------------------------------------------------------------- agreement checks

TEST(Errors, ShapeMismatch) {
  expect_shared_error(
      3,
      [](Peer& p) {
        Tensor t = Tensor::zeros(DType::f32, p.id() == 2 ? Shape{5} : Shape{4});
        Status s = p.all_reduce(t, ReduceOp::sum);
        EXPECT_EQ(t.to_vector<float>(), std::vector<float>(t.numel(), 0.f));
        return s;
      },
      Errc::shape_mismatch, {"all_reduce #0", "peer 0 has f32[4] but peer 2 has f32[5]"});
}

TEST(Errors, ShapeMismatchSameElementCount) {
  expect_shared_error(
      2,
      [](Peer& p) {
        Tensor t = Tensor::zeros(DType::f32, p.id() == 0 ? Shape{2, 3} : Shape{6});
        return p.all_reduce(t, ReduceOp::sum);
      },
      Errc::shape_mismatch, {"peer 0 has f32[2, 3] but peer 1 has f32[6]"});
}

TEST(Errors, DtypeMismatch) {
  expect_shared_error(
      3,
      [](Peer& p) {
        Tensor t = Tensor::zeros(p.id() == 1 ? DType::i32 : DType::f32, {4});
        return p.all_reduce(t, ReduceOp::sum);
      },
      Errc::dtype_mismatch, {"all_reduce #0", "peer 0 has f32[4] but peer 1 has i32[4]"});
}

TEST(Errors, OpKindMismatch) {
  expect_shared_error(
      3,
      [](Peer& p) {
        Tensor t = f32_zeros(4);
        if (p.id() == 1) return p.barrier();
        return p.all_reduce(t, ReduceOp::sum);
      },
      Errc::op_mismatch, {"#0", "peer 0 called all_reduce but peer 1 called barrier"});
}

TEST(Errors, ReduceOpMismatch) {
  expect_shared_error(
      3,
      [](Peer& p) {
        Tensor t = f32_zeros(4);
        return p.all_reduce(t, p.id() == 2 ? ReduceOp::min : ReduceOp::prod);
      },
      Errc::reduce_op_mismatch, {"all_reduce #0", "peer 0 reduces with prod but peer 2 with min"});
}

TEST(Errors, ReduceRootMismatch) {
  expect_shared_error(
      3,
      [](Peer& p) {
        Tensor t = f32_zeros(4);
        return p.reduce(t, ReduceOp::sum, p.id() == 1 ? 1 : 2);
      },
      Errc::root_mismatch, {"reduce #0", "peer 0 names root 2 but peer 1 names root 1"});
}

TEST(Errors, BroadcastRootMismatch) {
  expect_shared_error(
      3,
      [](Peer& p) {
        Tensor t = f32_zeros(4);
        return p.broadcast(t, p.id() == 2 ? 1 : 0);
      },
      Errc::root_mismatch, {"broadcast #0", "peer 0 names root 0 but peer 2 names root 1"});
}

TEST(Errors, RootIsNotAPeer) {
  expect_shared_error(
      3,
      [](Peer& p) {
        Tensor t = f32_zeros(4);
        return p.reduce(t, ReduceOp::sum, 7);
      },
      Errc::invalid_argument, {"reduce #0", "root 7 is not a peer (group of 3)"});
}

// A root past every int (the request keeps it as the op's int root): named as the caller gave it.
TEST(Errors, ARootBeyondEveryIntIsNamedAsGiven) {
  expect_shared_error(
      2,
      [](Peer& p) {
        Tensor t = f32_zeros(4);
        return p.broadcast(t, UINT32_MAX);
      },
      Errc::invalid_argument, {"broadcast #0", "root 4294967295 is not a peer (group of 2)"});
}

TEST(Errors, BroadcastByDataWithoutData) {
  expect_shared_error(
      3, [](Peer& p) { return p.broadcast(std::nullopt).status(); }, Errc::no_data,
      {"broadcast #0", "no peer supplied the data", "all 3 peers"});
}

TEST(Errors, BroadcastByDataFromSeveralPeers) {
  expect_shared_error(
      4,
      [](Peer& p) {
        std::optional<Tensor> d;
        if (p.id() == 1 || p.id() == 3) d = f32({1, 2});
        return p.broadcast(d).status();
      },
      Errc::multiple_data, {"broadcast #0", "peers 1, 3 all supplied data", "exactly one"});
}

TEST(Errors, ScatterByDataWithoutData) {
  expect_shared_error(
      3, [](Peer& p) { return p.scatter(std::nullopt).status(); }, Errc::no_data,
      {"scatter #0", "no peer supplied the data"});
}

TEST(Errors, ScatterByDataFromSeveralPeers) {
  expect_shared_error(
      3,
      [](Peer& p) {
        std::optional<Tensor> d;
        if (p.id() != 1) d = f32({1, 2, 3});
        return p.scatter(d).status();
      },
      Errc::multiple_data, {"scatter #0", "peers 0, 2 all supplied data"});
}

TEST(Errors, ScatterByDataThatDoesNotSplit) {
  expect_shared_error(
      3,
      [](Peer& p) {
        std::optional<Tensor> d;
        if (p.id() == 0) d = f32({1, 2, 3, 4});
        return p.scatter(d).status();
      },
      Errc::invalid_argument, {"peer 0", "scatter data f32[4] does not split into 3 equal parts"});
}

TEST(Errors, MixedRootedAndByDataBroadcast) {
  expect_shared_error(
      2,
      [](Peer& p) {
        Tensor t = f32_zeros(2);
        if (p.id() == 0) return p.broadcast(t, 0);
        return p.broadcast(std::nullopt).status();
      },
      Errc::op_mismatch, {"peers 0 and 1 mix the by-root and by-data forms of broadcast"});
}

TEST(Errors, BitwiseReduceOnFloatTypes) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16})
    for (ReduceOp op : {ReduceOp::band, ReduceOp::bor, ReduceOp::bxor}) {
      SCOPED_TRACE(std::string(to_string(t)) + " " + std::string(to_string(op)));
      expect_shared_error(
          2,
          [&](Peer& p) {
            Tensor x = Tensor::zeros(t, {8});
            return p.all_reduce(x, op);
          },
          Errc::invalid_argument,
          {"reduce op " + std::string(to_string(op)) + " is not defined for " + std::string(to_string(t))});
    }
}

TEST(Errors, BitwiseReduceOnIntegersWorks) {
  Runtime rt;
  run_peers(rt, config_for(3), [](Peer& p) {
    Tensor x = Tensor::from(std::vector<int32_t>{1 << p.id(), 7});
    ASSERT_TRUE(p.all_reduce(x, ReduceOp::bor).is_ok());
    EXPECT_EQ(x.to_vector<int32_t>(), (std::vector<int32_t>{7, 7}));
  });
}

TEST(Errors, ReduceScatterWithBitwiseOpOnFloat) {
  expect_shared_error(
      2,
      [](Peer& p) {
        Tensor in = f32_zeros(4), out = f32_zeros(2);
        return p.reduce_scatter(in, out, ReduceOp::bxor);
      },
      Errc::invalid_argument, {"reduce_scatter #0", "reduce op bxor is not defined for f32"});
}

// ---------------------------------------------------------------- buffer sizes

TEST(Errors, AllReduceOutputOfTheWrongSize) {
  expect_shared_error(
      2,
      [](Peer& p) {
        Tensor in = f32_zeros(4), out = f32_zeros(p.id() == 1 ? 5 : 4);
        return p.all_reduce(in, out, ReduceOp::sum);
      },
      Errc::invalid_argument, {"peer 1", "output f32[5] does not match input f32[4]"});
}

TEST(Errors, AllReduceInputAndOutputOfDifferentDtypes) {
  expect_shared_error(
      2,
      [](Peer& p) {
        Tensor in = f32_zeros(4), out = Tensor::zeros(p.id() == 0 ? DType::f64 : DType::f32, {4});
        return p.all_reduce(in, out, ReduceOp::sum);
      },
      Errc::dtype_mismatch, {"peer 0", "input is f32[4] but output is f64[4]"});
}

TEST(Errors, AllGatherOutputTooSmall) {
  expect_shared_error(
      3,
      [](Peer& p) {
        Tensor in = f32_zeros(4), out = f32_zeros(p.id() == 2 ? 8 : 12);
        return p.all_gather(in, out);
      },
      Errc::invalid_argument, {"all_gather #0", "peer 2", "output f32[8] must hold 3 x 4 elements"});
}

TEST(Errors, ReduceScatterInputNotNTimesOutput) {
  expect_shared_error(
      3,
      [](Peer& p) {
        Tensor in = f32_zeros(10), out = f32_zeros(3);
        return p.reduce_scatter(in, out, ReduceOp::sum);
      },
      Errc::invalid_argument, {"reduce_scatter #0", "peer 0", "input f32[10] must hold 3 x output f32[3]"});
}

TEST(Errors, AllToAllSizes) {
  expect_shared_error(
      3,
      [](Peer& p) {
        Tensor in = f32_zeros(6), out = f32_zeros(p.id() == 1 ? 9 : 6);
        return p.all_to_all(in, out);
      },
      Errc::invalid_argument, {"peer 1", "all_to_all input f32[6] and output f32[9]", "divisible by 3"});
}

TEST(Errors, GatherRootOutputTooSmall) {
  expect_shared_error(
      3,
      [](Peer& p) {
        Tensor in = f32_zeros(2), out = f32_zeros(5);
        return p.gather(in, out, 1);
      },
      Errc::invalid_argument, {"gather #0", "peer 1", "gather output on the root f32[5] must hold 3 x 2"});
}

TEST(Errors, ScatterRootInputWrongSize) {
  expect_shared_error(
      2,
      [](Peer& p) {
        Tensor in = f32_zeros(5), out = f32_zeros(2);
        return p.scatter(in, out, 0);
      },
      Errc::invalid_argument, {"scatter #0", "peer 0", "scatter input on the root f32[5] must hold 2 x output f32[2]"});
}

TEST(Errors, BroadcastReceiverShapeMismatch) {
  expect_shared_error(
      3,
      [](Peer& p) {
        Tensor buf = f32_zeros(p.id() == 0 ? 4 : 3);
        return p.broadcast(buf, 0);
      },
      Errc::shape_mismatch, {"broadcast #0", "peer 0 has f32[4] but peer 1 has f32[3]"});
}

TEST(Errors, BroadcastReceiverWithoutBuffer) {
  expect_shared_error(
      2,
      [](Peer& p) {
        Tensor buf = p.id() == 0 ? f32_zeros(4) : Tensor();
        return p.broadcast(buf, 0);
      },
      Errc::invalid_argument, {"peer 1", "broadcast buffer is missing"});
}

TEST(Errors, UndefinedTensor) {
  expect_shared_error(
      3,
      [](Peer& p) {
        Tensor t = p.id() == 1 ? Tensor() : f32_zeros(2);
        return p.all_reduce(t, ReduceOp::sum);
      },
      Errc::invalid_argument, {"all_reduce #0", "peer 1: input buffer is missing"});
}

TEST(Errors, SeveralErrorsInARowThenSuccess) {
  // Errors do not accumulate: three failing ops in a row, then the op after them works.
  Runtime rt;
  std::vector<std::vector<Status>> got(3);
  run_peers(rt, config_for(3), [&](Peer& p) {
    Tensor a = f32_zeros(p.id() + 1);
    got[p.id()].push_back(p.all_reduce(a, ReduceOp::sum));
    Tensor b = f32_zeros(2);
    got[p.id()].push_back(p.all_reduce(b, p.id() == 0 ? ReduceOp::band : ReduceOp::sum));
    got[p.id()].push_back(p.broadcast(std::nullopt).status());
    correct_all_reduce(p);
  });
  EXPECT_TRUE(has(got[0][0], Errc::shape_mismatch, {"all_reduce #0"}));
  EXPECT_TRUE(has(got[0][1], Errc::invalid_argument, {"all_reduce #1", "band"}));
  EXPECT_TRUE(has(got[0][2], Errc::no_data, {"broadcast #2"}));
  for (int p = 1; p < 3; ++p) EXPECT_EQ(got[p], got[0]);
}

// ---------------------------------------------------------------- point to point arguments

TEST(Errors, SendToSelfAndToANonPeer) {
  Runtime rt;
  run_peers(rt, config_for(2), [](Peer& p) {
    Tensor t = f32({1});
    EXPECT_TRUE(has(p.send(t, p.id()), Errc::invalid_argument,
                    {"peer " + std::to_string(p.id()) + ": send to peer " + std::to_string(p.id()) + " (itself)"}));
    EXPECT_TRUE(has(p.recv(t, p.id()), Errc::invalid_argument, {"recv from peer " + std::to_string(p.id()) + " (itself)"}));
    EXPECT_TRUE(has(p.send(t, 2), Errc::invalid_argument, {"send to peer 2 (not a peer)"}));
    EXPECT_TRUE(has(p.recv(t, 9), Errc::invalid_argument, {"recv from peer 9 (not a peer)"}));
    EXPECT_EQ(t.to_vector<float>(), std::vector<float>{1});
    correct_all_reduce(p);
  });
}

TEST(Errors, SendRecvSizeAndDtypeMismatch) {
  Runtime rt;
  std::vector<Status> a(2), b(2);
  run_peers(rt, config_for(2), [&](Peer& p) {
    if (p.id() == 0) {
      Tensor t = f32({1, 2, 3});
      a[0] = p.send(t, 1);
      b[0] = p.send(t, 1, 5);
    } else {
      Tensor small = f32_zeros(2);
      a[1] = p.recv(small, 0);
      Tensor other = Tensor::zeros(DType::i32, {3});
      b[1] = p.recv(other, 0, 5);
    }
    correct_all_reduce(p);
  });
  EXPECT_TRUE(has(a[0], Errc::shape_mismatch, {"send/recv 0->1 tag 0", "sender has f32[3], receiver f32[2]"}));
  EXPECT_EQ(a[1], a[0]);
  EXPECT_TRUE(has(b[0], Errc::dtype_mismatch, {"send/recv 0->1 tag 5", "sender has f32[3], receiver i32[3]"}));
  EXPECT_EQ(b[1], b[0]);
}

} // namespace
} // namespace chorus
