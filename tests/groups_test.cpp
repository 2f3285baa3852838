// Groups (new_group, split, destroy), ops inside them running concurrently with the world, and the
// object collectives (payloads of different sizes per peer).
#include <gtest/gtest.h>

#include <numeric>
#include <thread>

#include "peer_harness.hpp"
#include "status_matchers.hpp"

namespace chorus {
namespace {

using harness::config_for;
using harness::run_peers;

std::vector<float> filled(std::size_t n, float v) { return std::vector<float>(n, v); }

TEST(Groups, DisjointPairsRunConcurrentlyWithTheWorld) {
  Runtime rt;
  run_peers(rt, config_for(4), [&](Peer& p) {
    const PeerId me = p.id();
    std::vector<PeerId> pair = me < 2 ? std::vector<PeerId>{0, 1} : std::vector<PeerId>{2, 3};
    auto g = p.new_group(pair);
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    EXPECT_EQ(g->size(), 2u);
    EXPECT_EQ(g->rank(), me % 2);
    EXPECT_NE(g->group(), 0u);
    // The pair's ops run on a second thread while this one runs world ops: blocking collectives
    // of different groups interleave freely, and must not mix.
    std::thread pair_thread([&] {
      for (int it = 0; it < 60; ++it) {
        Tensor a = Tensor::from(filled(100 + it, float(me + 1)));
        Status s = g->all_reduce(a, ReduceOp::sum);
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        ASSERT_EQ(a.data_as<float>()[99 + it], me < 2 ? 1.0f + 2.0f : 3.0f + 4.0f) << "iteration " << it;
      }
    });
    for (int it = 0; it < 60; ++it) {
      Tensor w = Tensor::from(filled(50, float(me + it)));
      Status s = p.all_reduce(w, ReduceOp::sum);
      ASSERT_TRUE(s.is_ok()) << s.to_string();
      ASSERT_EQ(w.data_as<float>()[49], float(0 + 1 + 2 + 3 + 4 * it)) << "iteration " << it;
    }
    pair_thread.join();
    EXPECT_TRUE(g->destroy().is_ok());
  });
}

TEST(Groups, OverlappingGroupsAndRootsAreRanks) {
  Runtime rt;
  run_peers(rt, config_for(4), [&](Peer& p) {
    const PeerId me = p.id();
    std::optional<Peer> low, high;
    // Every peer creates the groups it belongs to in the same order: {0,1,2} then {3,2,1}.
    if (me <= 2) {
      auto g = p.new_group({0, 1, 2});
      ASSERT_TRUE(g.is_ok()) << g.status().to_string();
      low = *g;
    }
    if (me >= 1) {
      auto g = p.new_group({3, 2, 1});
      ASSERT_TRUE(g.is_ok()) << g.status().to_string();
      high = *g;
      EXPECT_EQ(high->rank(), 3 - me);  // ranks follow the member list's order
    }
    for (int it = 0; it < 20; ++it) {
      if (low) {  // broadcast from rank 2 of {0,1,2}: global peer 2
        Tensor b = Tensor::from(filled(8, me == 2 ? float(it) : -1.0f));
        Status s = low->broadcast(b, 2);
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        ASSERT_EQ(b.data_as<float>()[7], float(it));
      }
      if (high) {  // gather to rank 0 of {3,2,1}: global peer 3, blocks in rank order 3, 2, 1
        Tensor in = Tensor::from(std::vector<int32_t>{int32_t(me * 10 + it)});
        Tensor out = Tensor::zeros(DType::i32, {3});
        Status s = high->gather(in, out, 0);
        ASSERT_TRUE(s.is_ok()) << s.to_string();
        if (me == 3) {
          auto v = out.to_vector<int32_t>();
          ASSERT_EQ(v, (std::vector<int32_t>{30 + it, 20 + it, 10 + it}));
        }
      }
    }
  });
}

TEST(Groups, SplitByColorOrdersByKey) {
  Runtime rt;
  run_peers(rt, config_for(6), [&](Peer& p) {
    const int me = static_cast<int>(p.id());
    auto g = p.split(me % 2, -me);  // evens and odds, highest id first
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    EXPECT_EQ(g->size(), 3u);
    std::vector<PeerId> expect = me % 2 ? std::vector<PeerId>{5, 3, 1} : std::vector<PeerId>{4, 2, 0};
    EXPECT_EQ(g->members(), expect);
    Tensor in = Tensor::from(std::vector<int64_t>{me});
    Tensor out = Tensor::zeros(DType::i64, {3});
    ASSERT_TRUE(g->all_gather(in, out).is_ok());
    EXPECT_EQ(out.to_vector<int64_t>(), (std::vector<int64_t>(expect.begin(), expect.end())));
    // A negative color joins no group; the others still form theirs.
    auto h = p.split(me == 0 ? -1 : 0, me);
    ASSERT_TRUE(h.is_ok()) << h.status().to_string();
    EXPECT_EQ(h->size(), me == 0 ? 0u : 5u);
  });
}

// In one process every member is on node 0: the intra-node group is the whole group, and the
// inter-node group is its rank 0 alone (the others get an empty handle).
TEST(Groups, IntraAndInterNodeGroupsInOneProcess) {
  Runtime rt;
  run_peers(rt, config_for(4), [&](Peer& p) {
    auto g = p.new_group({3, 1, 2});
    if (p.id() == 0) return;
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    auto intra = g->intra_node();
    ASSERT_TRUE(intra.is_ok()) << intra.status().to_string();
    EXPECT_EQ(intra->members(), (std::vector<PeerId>{3, 1, 2}));
    EXPECT_EQ(intra->node(), 0u);
    auto inter = g->inter_node();
    ASSERT_TRUE(inter.is_ok()) << inter.status().to_string();
    EXPECT_EQ(inter->members(), p.id() == 3 ? std::vector<PeerId>{3} : std::vector<PeerId>{});
    Tensor x = Tensor::from(std::vector<int64_t>{1});
    ASSERT_TRUE(intra->all_reduce(x, ReduceOp::sum).is_ok());
    EXPECT_EQ(x.to_vector<int64_t>(), (std::vector<int64_t>{3}));
  });
}

TEST(Groups, BadMemberListsAreRejected) {
  Runtime rt;
  run_peers(rt, config_for(3, "auto", 300), [&](Peer& p) {
    EXPECT_TRUE(has(p.new_group({}).status(), Errc::invalid_argument, {"empty"}));
    EXPECT_TRUE(has(p.new_group({0, 1, 7}).status(), Errc::invalid_argument, {"member 7 is not a peer"}));
    EXPECT_TRUE(has(p.new_group({0, 0, 1, 2}).status(), Errc::invalid_argument, {"member 0 is listed twice"}));
    if (p.id() == 0) {
      EXPECT_TRUE(has(p.new_group({1, 2}).status(), Errc::invalid_argument, {"not in the member list"}));
    }
    EXPECT_TRUE(has(p.destroy(), Errc::invalid_argument, {"world"}));
  });
}

TEST(Groups, MembersThatDisagreeTimeOutNamingWhoIsMissing) {
  Runtime rt;
  run_peers(rt, config_for(3, "auto", 250), [&](Peer& p) {
    // Peer 2 thinks the group is {1, 2}; peers 0 and 1 think it is {0, 1, 2}.
    auto g = p.id() == 2 ? p.new_group({1, 2}) : p.new_group({0, 1, 2});
    if (p.id() == 2) EXPECT_TRUE(has(g.status(), Errc::timeout, {"peer 1 never asked"}));
    else EXPECT_TRUE(has(g.status(), Errc::timeout, {"peer 2 never asked"}));
    // The world still works afterwards.
    Tensor t = Tensor::from(filled(4, 1.0f));
    ASSERT_TRUE(p.all_reduce(t, ReduceOp::sum).is_ok());
    EXPECT_EQ(t.data_as<float>()[3], 3.0f);
  });
}

TEST(Groups, OpsOnADestroyedGroupFail) {
  Runtime rt;
  run_peers(rt, config_for(2), [&](Peer& p) {
    auto g = p.new_group({0, 1});
    ASSERT_TRUE(g.is_ok());
    ASSERT_TRUE(g->barrier().is_ok());
    EXPECT_TRUE(has(g->finish(), Errc::invalid_argument, {"world handle"}));
    ASSERT_TRUE(g->destroy().is_ok());
    EXPECT_TRUE(has(g->barrier(), Errc::invalid_argument, {"destroyed"}));
    EXPECT_TRUE(has(g->destroy(), Errc::invalid_argument, {"already destroyed"}));
    ASSERT_TRUE(p.barrier().is_ok());
  });
}

TEST(ObjectCollectives, AllGatherAndBroadcastOfDifferentLengths) {
  Runtime rt;
  const std::vector<std::size_t> lengths = {0, 1, 8u << 20, 12345};
  run_peers(rt, config_for(4), [&](Peer& p) {
    const PeerId me = p.id();
    std::string mine(lengths[me], char('a' + me));
    auto all = p.all_gather_object(mine);
    ASSERT_TRUE(all.is_ok()) << all.status().to_string();
    ASSERT_EQ(all->size(), 4u);
    for (PeerId r = 0; r < 4; ++r) EXPECT_EQ((*all)[r], std::string(lengths[r], char('a' + r))) << r;
    for (std::size_t len : {std::size_t(0), std::size_t(3), std::size_t(8u << 20)}) {
      std::optional<std::string> data;
      if (me == 1) data = std::string(len, 'z');
      auto got = p.broadcast_object(data);
      ASSERT_TRUE(got.is_ok()) << got.status().to_string();
      EXPECT_EQ(*got, std::string(len, 'z'));
    }
  });
}

TEST(ObjectCollectives, AllGatherVAndGatherVKeepShapes) {
  Runtime rt;
  run_peers(rt, config_for(3), [&](Peer& p) {
    const int64_t me = p.id();
    std::vector<double> v(static_cast<std::size_t>((me + 1) * 2));
    std::iota(v.begin(), v.end(), double(me * 100));
    Tensor in = Tensor::from(v, {me + 1, 2});
    auto all = p.all_gather_v(in);
    ASSERT_TRUE(all.is_ok()) << all.status().to_string();
    for (int64_t r = 0; r < 3; ++r) {
      EXPECT_EQ((*all)[r].shape(), (Shape{r + 1, 2}));
      EXPECT_EQ((*all)[r].data_as<double>()[0], double(r * 100));
      EXPECT_EQ((*all)[r].data_as<double>()[(r + 1) * 2 - 1], double(r * 100 + (r + 1) * 2 - 1));
    }
    auto g = p.gather_v(in, 2);
    ASSERT_TRUE(g.is_ok()) << g.status().to_string();
    EXPECT_EQ(g->size(), me == 2 ? 3u : 0u);
    if (me == 2) {
      EXPECT_EQ((*g)[1].data_as<double>()[3], 103.0);
    }
    // Different dtypes: every peer gets the same error.
    Tensor odd = me == 1 ? Tensor::from(std::vector<int32_t>{1}) : Tensor::from(std::vector<float>{1});
    EXPECT_TRUE(has(p.all_gather_v(odd).status(), Errc::dtype_mismatch, {"rank 1 has i32"}));
  });
}

} // namespace
} // namespace chorus
