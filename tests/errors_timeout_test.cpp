// Timeouts of collectives and of send/recv: the error names the peers that never called, and a
// late peer gets the same error at once; the next op (a correct all_reduce, checked for its
// values) works normally afterwards. A late peer waits for the others' error, not for a time.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include <chorus/chorus.hpp>
#include "error_checks.hpp"
#include "test_events.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;
using namespace testing;

TEST(Errors, TimeoutNamesThePeerThatNeverCalledAndTheLatePeerGetsTheSameError) {
  Runtime rt;
  const Config c = config_for(3, "auto", 200);
  std::vector<Status> got(3);
  EventCount returned;
  std::vector<Clock::duration> waited(3);
  run_peers(rt, c, [&](Peer& p) {
    Tensor t = f32({1, 2, 3});
    if (p.id() == 2) {
      // Peer 2 calls only after the other two gave up.
      EXPECT_TRUE(returned.wait_for(2));
    }
    const auto t0 = Clock::now();
    got[p.id()] = p.all_reduce(t, ReduceOp::sum);
    waited[p.id()] = Clock::now() - t0;
    EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3}));
    returned.raise();
    correct_all_reduce(p);
  });
  EXPECT_TRUE(has(got[0], Errc::timeout, {"all_reduce #0", "peer 2 never called within 200 ms"}));
  EXPECT_EQ(got[1], got[0]);
  EXPECT_EQ(got[2], got[0]) << "the late peer gets the op's error";
  for (int p = 0; p < 2; ++p) {
    EXPECT_GE(waited[p], 150ms);
    EXPECT_LT(waited[p], 2000ms);
  }
  EXPECT_LT(waited[2], 100ms) << "the late peer is answered at once";
}

TEST(Errors, TimeoutNamesEveryMissingPeer) {
  Runtime rt;
  const Config c = config_for(4, "auto", 150);
  std::vector<Result<Peer>> peers;
  for (uint32_t p = 0; p < 4; ++p) peers.push_back(rt.register_peer(p, c));
  Status s = peers[1]->barrier();
  EXPECT_TRUE(has(s, Errc::timeout, {"barrier #0", "peers 0, 2, 3 never called within 150 ms"}));
}

TEST(Errors, SendTimeoutNamesTheMissingReceiver) {
  Runtime rt;
  std::vector<Status> got(2);
  EventCount gave_up;
  run_peers(rt, config_for(2, "auto", 150), [&](Peer& p) {
    Tensor t = f32({1, 2});
    if (p.id() == 0) {
      got[0] = p.send(t, 1, 42);
      gave_up.raise();
    } else {
      EXPECT_TRUE(gave_up.wait_for(1));  // never posts the recv in time
    }
    correct_all_reduce(p);
  });
  EXPECT_TRUE(has(got[0], Errc::timeout, {"send 0->1 tag 42", "peer 1 never posted the matching recv within 150 ms"}));
}

TEST(Errors, RecvTimeoutNamesTheMissingSender) {
  Runtime rt;
  std::vector<Status> got(3);
  EventCount gave_up;
  run_peers(rt, config_for(3, "auto", 150), [&](Peer& p) {
    Tensor t = f32_zeros(2);
    if (p.id() == 2) {
      got[2] = p.recv(t, 0);
      EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 0}));
      gave_up.raise();
    } else {
      EXPECT_TRUE(gave_up.wait_for(1));
    }
    correct_all_reduce(p);
  });
  EXPECT_TRUE(has(got[2], Errc::timeout, {"recv 0->2 tag 0", "peer 0 never posted the matching send within 150 ms"}));
}

TEST(Errors, SendRecvWorksAfterATimeout) {
  Runtime rt;
  EventCount gave_up;
  run_peers(rt, config_for(2, "auto", 150), [&](Peer& p) {
    Tensor t = f32({5, 6});
    if (p.id() == 0) {
      EXPECT_EQ(p.send(t, 1).code(), Errc::timeout);
      gave_up.raise();
      EXPECT_TRUE(p.send(t, 1).is_ok());
    } else {
      EXPECT_TRUE(gave_up.wait_for(1));
      Tensor r = f32_zeros(2);
      EXPECT_TRUE(p.recv(r, 0).is_ok());
      EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{5, 6}));
    }
    correct_all_reduce(p);
  });
}

} // namespace
} // namespace chorus
