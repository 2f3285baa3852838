// Peer::all_reduce_coalesced between the peers of one process: every tensor of a list of small and
// large ones gets its reduction, in the ops the flight recorder shows (one exchange of what each
// peer passes, one op per packed buffer, one per large tensor); the non-blocking form; lists that
// differ across peers (order, count, dtype) or within one (dtypes) fail every peer alike and
// leave the handle usable; an empty list.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include <chorus/chorus.hpp>
#include "observability/flight/flight_recorder.hpp"
#include "peer_harness.hpp"
#include "runtime/runtime_impl.hpp"

namespace chorus {
namespace {

using harness::config_for;
using harness::run_peers;

// Tensor i of rank r: element j is (r + 1) * (i + 1) + j % 5, so every sum is an exact float.
Tensor input(uint32_t r, std::size_t i, int64_t numel) {
  std::vector<float> v(static_cast<std::size_t>(numel));
  for (std::size_t j = 0; j < v.size(); ++j) v[j] = static_cast<float>((r + 1) * (i + 1) + j % 5);
  return Tensor::from(v);
}

float sum_of(uint32_t n, std::size_t i, std::size_t j) {
  float s = 0;
  for (uint32_t r = 0; r < n; ++r) s += static_cast<float>((r + 1) * (i + 1) + j % 5);
  return s;
}

// The collective ops peer 0 ran, oldest first, and what ran each: "all_gather i64[6] @ring".
std::vector<std::string> ops_of_peer0(Runtime& rt) {
  std::vector<std::string> out;
  auto& flight = RuntimeAccess::impl(rt).flight;
  if (!flight) return out;
  auto rows = flight->rows();
  std::sort(rows.begin(), rows.end(), [](const FlightRow& a, const FlightRow& b) { return a.op.seq < b.op.seq; });
  for (const auto& row : rows)
    if (row.peer == 0 && row.collective()) out.push_back(row.describe() + " @" + row.strategy);
  return out;
}

// Every tensor of rank-dependent values gets its sum, in the ops that `want` lists.
void expect_sums_in_ops(const char* strategy, const std::vector<int64_t>& sizes, const std::vector<std::string>& want) {
  constexpr uint32_t n = 3;
  Runtime rt;
  Config cfg = config_for(n, strategy);
  cfg.flight_recorder = 512;
  run_peers(rt, cfg, [&](Peer& peer) {
    std::vector<Tensor> ts;
    for (std::size_t i = 0; i < sizes.size(); ++i) ts.push_back(input(peer.rank(), i, sizes[i]));
    const Status s = peer.all_reduce_coalesced(ts, ReduceOp::sum);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    for (std::size_t i = 0; i < ts.size(); ++i) {
      const float* v = ts[i].data_as<float>();
      for (std::size_t j = 0; j < ts[i].numel(); j += 1 + ts[i].numel() / 97)
        ASSERT_EQ(v[j], sum_of(n, i, j)) << "tensor " << i << " element " << j;
      ASSERT_EQ(v[ts[i].numel() - 1], sum_of(n, i, ts[i].numel() - 1)) << "tensor " << i;
    }
  });
  EXPECT_EQ(ops_of_peer0(rt), want);
}

// Without the arena (a fixed strategy) the planner packs up to 1 MiB, and tensors of up to an
// eighth of that: the large ones run as they come, the packed ones in order, a buffer flushed
// when the next tensor would overfill it.
TEST(Coalesced, SmallTensorsArePackedAndLargeOnesRunAlone) {
  std::vector<int64_t> sizes{1, 7, 256, 32768, 32769, 300000, 3};  // 32768 floats: 128 KiB
  for (int k = 0; k < 10; ++k) sizes.push_back(32768);
  const std::string first = std::to_string(1 + 7 + 256 + 32768 + 3 + 6 * 32768);  // a 7th would overfill it
  expect_sums_in_ops("ring", sizes,
                     {"all_gather i64[6] @ring", "all_reduce f32[32769] sum @ring", "all_reduce f32[300000] sum @ring",
                      "all_reduce f32[" + first + "] sum @ring", "all_reduce f32[131072] sum @ring"});
}

// Where the world's ops meet in the arena, a pack is the arena's slot (64 KiB per peer here), so
// that it runs there as one op; tensors of over 8 KiB run alone.
TEST(Coalesced, WithAnArenaAPackIsOneArenaOp) {
  std::vector<int64_t> sizes(20, 256);  // 20 x 1 KiB
  sizes.insert(sizes.begin() + 5, 2049);
  sizes.push_back(2048);  // 8 KiB: packed
  expect_sums_in_ops("auto", sizes,
                     {"all_gather i64[6] @arena", "all_reduce f32[2049] sum @arena", "all_reduce f32[7168] sum @arena"});
}

TEST(Coalesced, TheNonBlockingFormKeepsItsPlaceAmongTheHandlesOps) {
  constexpr uint32_t n = 2;
  Runtime rt;
  run_peers(rt, config_for(n), [&](Peer& peer) {
    const uint32_t r = peer.rank();
    std::vector<Tensor> ts{input(r, 0, 10), input(r, 1, 20)};
    Tensor before = input(r, 5, 4), after = input(r, 6, 4);
    Work a = peer.all_reduce_async(before, ReduceOp::sum);
    Work b = peer.all_reduce_coalesced_async(ts, ReduceOp::max);
    Work c = peer.all_reduce_async(after, ReduceOp::sum);
    ASSERT_TRUE(c.wait().is_ok());
    ASSERT_TRUE(b.wait().is_ok());
    ASSERT_TRUE(a.wait().is_ok());
    // Max over the ranks: the last rank's values.
    for (std::size_t i = 0; i < 2; ++i)
      for (std::size_t j = 0; j < ts[i].numel(); ++j)
        ASSERT_EQ(ts[i].data_as<float>()[j], static_cast<float>(n * (i + 1) + j % 5));
    EXPECT_EQ(before.data_as<float>()[3], sum_of(n, 5, 3));
    EXPECT_EQ(after.data_as<float>()[3], sum_of(n, 6, 3));
  });
}

// Every peer gets the same error, no tensor changes, and the next op of the handle still meets.
void expect_fails_alike(uint32_t n, const std::function<std::vector<Tensor>(uint32_t)>& list_of, Errc code,
                        const std::string& words) {
  Runtime rt;
  std::vector<std::string> got(n);
  run_peers(rt, config_for(n), [&](Peer& peer) {
    std::vector<Tensor> ts = list_of(peer.rank());
    std::vector<std::vector<std::byte>> was;
    for (const auto& t : ts) {
      const auto* p = static_cast<const std::byte*>(t.data());
      was.emplace_back(p, p + t.nbytes());
    }
    const Status s = peer.all_reduce_coalesced(ts, ReduceOp::sum);
    EXPECT_EQ(s.code(), code) << s.to_string();
    got[peer.rank()] = s.message();
    for (std::size_t i = 0; i < ts.size(); ++i) {
      const auto* p = static_cast<const std::byte*>(ts[i].data());
      EXPECT_EQ(std::vector<std::byte>(p, p + ts[i].nbytes()), was[i]) << "tensor " << i << " changed";
    }
    Tensor next = input(peer.rank(), 0, 8);
    EXPECT_TRUE(peer.all_reduce(next, ReduceOp::sum).is_ok());
    EXPECT_EQ(next.data_as<float>()[7], sum_of(n, 0, 7));
  });
  for (uint32_t r = 0; r < n; ++r) EXPECT_NE(got[r].find(words), std::string::npos) << "rank " << r << ": " << got[r];
}

TEST(Coalesced, ListsInAnotherOrderFailEveryPeerAlike) {
  expect_fails_alike(
      3,
      [](uint32_t r) {
        return r == 2 ? std::vector<Tensor>{input(r, 0, 20), input(r, 1, 10)}
                      : std::vector<Tensor>{input(r, 0, 10), input(r, 1, 20)};
      },
      Errc::shape_mismatch, "all_reduce_coalesced: rank 2's tensors differ from rank 0's in their shapes, order or devices");
}

TEST(Coalesced, ListsOfAnotherLengthFailEveryPeerAlike) {
  expect_fails_alike(
      2,
      [](uint32_t r) {
        std::vector<Tensor> ts{input(r, 0, 10), input(r, 1, 20)};
        if (r == 1) ts.push_back(input(r, 2, 5));
        return ts;
      },
      Errc::shape_mismatch,
      "all_reduce_coalesced: rank 0 passes 2 f32 tensors of 30 elements in all but rank 1 passes 3 f32 tensors of 35");
}

TEST(Coalesced, ListsOfAnotherDTypeFailEveryPeerAlike) {
  expect_fails_alike(
      2,
      [](uint32_t r) {
        if (r == 1) return std::vector<Tensor>{Tensor::from(std::vector<int32_t>(10, 1))};
        return std::vector<Tensor>{input(r, 0, 10)};
      },
      Errc::dtype_mismatch, "rank 0 passes 1 f32 tensor of 10 elements in all but rank 1 passes 1 i32 tensor of 10");
}

TEST(Coalesced, AListOfTwoDTypesFailsItsPeerWithTheTensorsAndTheOthersWithItsRank) {
  Runtime rt;
  std::vector<Status> got(2);
  run_peers(rt, config_for(2), [&](Peer& peer) {
    std::vector<Tensor> ts{input(peer.rank(), 0, 4)};
    if (peer.rank() == 1) ts.push_back(Tensor::from(std::vector<double>(3, 1.0)));
    else ts.push_back(input(peer.rank(), 1, 3));
    got[peer.rank()] = peer.all_reduce_coalesced(ts, ReduceOp::sum);
  });
  EXPECT_EQ(got[0].code(), Errc::invalid_argument);
  EXPECT_EQ(got[0].message(), "all_reduce_coalesced: rank 1's tensors are not all of one dtype");
  EXPECT_EQ(got[1].code(), Errc::invalid_argument);
  EXPECT_EQ(got[1].message(),
            "all_reduce_coalesced: tensor 1 is f64[3] but tensor 0 is f32[4]: the tensors of one call share a dtype");
}

TEST(Coalesced, AnEmptyListIsAnOpOfItsOwn) {
  Runtime rt;
  run_peers(rt, config_for(2), [&](Peer& peer) {
    std::vector<Tensor> none;
    EXPECT_TRUE(peer.all_reduce_coalesced(none, ReduceOp::sum).is_ok());
  });
  expect_fails_alike(
      2, [](uint32_t r) { return r == 0 ? std::vector<Tensor>{} : std::vector<Tensor>{input(r, 0, 4)}; },
      Errc::shape_mismatch, "all_reduce_coalesced: rank 0 passes no tensors but rank 1 passes 1 f32 tensor of 4 elements in all");
}

} // namespace
} // namespace chorus
