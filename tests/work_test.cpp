// Non-blocking ops (Peer::*_async and Work) between the peers of one process: every kind in flight
// at once and waited out of order, waits with a limit, a dropped Work, failures reaching every
// Work, per-op timeouts, concurrent groups, exchanges of sends and receives, callbacks.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "collective_cases.hpp"
#include "peer_harness.hpp"
#include "test_events.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;
using namespace testing;

std::vector<float> filled(std::size_t n, float v) { return std::vector<float>(n, v); }

// Every op kind, all handed in before any is waited for, then waited last to first.
TEST(Work, EveryKindInFlightAtOnceWaitedInReverse) {
  constexpr uint32_t n = 4;
  Runtime rt;
  Reporter rep;
  harness::run_peers(rt, harness::config_for(n), [&](Peer& peer) {
    const uint32_t r = peer.rank();
    const float me = static_cast<float>(r + 1);  // 1..4: sum 10
    Tensor ar = Tensor::from(filled(5, me));
    Tensor red = Tensor::from(filled(3, me));
    Tensor bc = Tensor::from(filled(4, r == 2 ? 7.0f : 0.0f));
    Tensor ag_in = Tensor::from(std::vector<float>{me});
    Tensor ag_out = Tensor::zeros(DType::f32, {n});
    Tensor rs_in = Tensor::from(filled(2 * n, me));
    Tensor rs_out = Tensor::zeros(DType::f32, {2});
    std::vector<float> a2a(n);
    for (uint32_t j = 0; j < n; ++j) a2a[j] = static_cast<float>(10 * r + j);
    Tensor a2a_in = Tensor::from(a2a), a2a_out = Tensor::zeros(DType::f32, {n});
    Tensor g_in = Tensor::from(std::vector<float>{me}), g_out = Tensor::zeros(DType::f32, {n});
    std::vector<float> sc(n);
    std::iota(sc.begin(), sc.end(), 100.0f);
    Tensor sc_in = Tensor::from(sc), sc_out = Tensor::zeros(DType::f32, {1});
    std::vector<int32_t> vpart(r + 1, static_cast<int32_t>(r));
    Tensor v_in = Tensor::from(vpart);

    std::vector<Work> w;
    w.push_back(peer.all_reduce_async(ar, ReduceOp::sum));                             // 0
    w.push_back(peer.reduce_async(red, ReduceOp::max, 1));                             // 1
    w.push_back(peer.broadcast_async(bc, 2));                                          // 2
    w.push_back(peer.broadcast_async(r == 3 ? std::optional<Tensor>(Tensor::from(std::vector<int64_t>{5, 6}))
                                            : std::nullopt));                          // 3
    w.push_back(peer.all_gather_async(ag_in, ag_out));                                 // 4
    w.push_back(peer.reduce_scatter_async(rs_in, rs_out, ReduceOp::sum));              // 5
    w.push_back(peer.all_to_all_async(a2a_in, a2a_out));                               // 6
    w.push_back(peer.gather_async(g_in, g_out, 0));                                    // 7
    w.push_back(peer.scatter_async(sc_in, sc_out, 3));                                 // 8
    w.push_back(peer.scatter_async(r == 0 ? std::optional<Tensor>(Tensor::from(sc)) : std::nullopt));  // 9
    w.push_back(peer.barrier_async());                                                 // 10
    w.push_back(peer.all_gather_object_async(std::string(r, 'x')));                    // 11
    w.push_back(peer.broadcast_object_async(r == 1 ? std::optional<std::string>("hello") : std::nullopt));  // 12
    w.push_back(peer.all_gather_v_async(v_in));                                        // 13
    w.push_back(peer.gather_v_async(v_in, 2));                                         // 14
    for (std::size_t i = w.size(); i-- > 0;) {
      Status s = w[i].wait();
      if (!s) rep.fail("rank " + std::to_string(r) + " op " + std::to_string(i) + ": " + s.to_string());
      if (!w[i].test()) rep.fail("test() is false after wait()");
    }
    auto expect = [&](bool ok, const std::string& what) {
      if (!ok) rep.fail("rank " + std::to_string(r) + ": " + what);
    };
    expect(ar.to_vector<float>() == filled(5, 10.0f), "all_reduce");
    if (r == 1) expect(red.to_vector<float>() == filled(3, 4.0f), "reduce at the root");
    else expect(red.to_vector<float>() == filled(3, me), "reduce left a non-root's buffer alone");
    expect(bc.to_vector<float>() == filled(4, 7.0f), "rooted broadcast");
    auto b3 = w[3].result();
    expect(b3 && b3->size() == 1 && (*b3)[0].to_vector<int64_t>() == std::vector<int64_t>{5, 6}, "broadcast by data");
    expect(ag_out.to_vector<float>() == std::vector<float>{1, 2, 3, 4}, "all_gather");
    expect(rs_out.to_vector<float>() == filled(2, 10.0f), "reduce_scatter");
    std::vector<float> want_a2a(n);
    for (uint32_t i = 0; i < n; ++i) want_a2a[i] = static_cast<float>(10 * i + r);
    expect(a2a_out.to_vector<float>() == want_a2a, "all_to_all");
    if (r == 0) expect(g_out.to_vector<float>() == std::vector<float>{1, 2, 3, 4}, "gather at the root");
    expect(sc_out.to_vector<float>() == std::vector<float>{100.0f + r}, "rooted scatter");
    auto s9 = w[9].result();
    expect(s9 && s9->size() == 1 && (*s9)[0].to_vector<float>() == std::vector<float>{100.0f + r}, "scatter by data");
    auto objs = w[11].objects();
    expect(objs && objs->size() == n, "all_gather_object gives one payload per rank");
    if (objs && objs->size() == n)
      for (uint32_t i = 0; i < n; ++i) expect((*objs)[i] == std::string(i, 'x'), "all_gather_object payload");
    auto bo = w[12].objects();
    expect(bo && bo->size() == 1 && (*bo)[0] == "hello", "broadcast_object");
    auto av = w[13].result();
    expect(av && av->size() == n, "all_gather_v gives one tensor per rank");
    if (av && av->size() == n)
      for (uint32_t i = 0; i < n; ++i)
        expect((*av)[i].to_vector<int32_t>() == std::vector<int32_t>(i + 1, static_cast<int32_t>(i)), "all_gather_v part");
    auto gv = w[14].result();
    expect(gv && gv->size() == (r == 2 ? n : 0u), "gather_v: every part at the root, none elsewhere");
    auto ar_result = w[0].result();
    expect(ar_result && ar_result->size() == 1 && (*ar_result)[0].data() == ar.data(),
           "all_reduce's result is the caller's own buffer");
  });
  rep.expect_clean();
}

// Many ops of one handle in flight: they run in call order (each peer's k-th op meets the
// others' k-th), whatever order they are waited in; a blocking op after them waits its turn.
TEST(Work, ManyInFlightKeepCallOrder) {
  constexpr uint32_t n = 3;
  constexpr int ops = 40;
  Runtime rt;
  Reporter rep;
  harness::run_peers(rt, harness::config_for(n), [&](Peer& peer) {
    std::vector<Tensor> bufs;
    std::vector<Work> works;
    for (int i = 0; i < ops; ++i) {
      bufs.push_back(Tensor::from(filled(64 + i, static_cast<float>(i * (peer.rank() + 1)))));
      works.push_back(peer.all_reduce_async(bufs.back(), ReduceOp::sum));
    }
    Tensor last = Tensor::from(filled(8, 1.0f));
    if (Status s = peer.all_reduce(last, ReduceOp::sum); !s) rep.fail("the blocking op after them: " + s.to_string());
    if (last.to_vector<float>() != filled(8, 3.0f)) rep.fail("the blocking op's result");
    for (int i = 0; i < ops; i += 2) {  // evens, then odds backwards
      if (Status s = works[i].wait(); !s) rep.fail("op " + std::to_string(i) + ": " + s.to_string());
    }
    for (int i = ops - 1; i > 0; i -= 2)
      if (Status s = works[i].wait(); !s) rep.fail("op " + std::to_string(i) + ": " + s.to_string());
    for (int i = 0; i < ops; ++i)
      if (bufs[i].to_vector<float>() != filled(64 + i, static_cast<float>(i * 6)))
        rep.fail("op " + std::to_string(i) + " holds the wrong sum");
  });
  rep.expect_clean();
}

// wait_for ends at its limit while the other peer has not called, and the op goes on: once the
// other peer calls, wait() sees it done.
TEST(Work, WaitForEndsAtItsLimitAndTheOpGoesOn) {
  Runtime rt;
  Reporter rep;
  EventCount gave_up;
  harness::run_peers(rt, harness::config_for(2), [&](Peer& peer) {
    Tensor t = Tensor::from(filled(6, static_cast<float>(peer.rank() + 1)));
    if (peer.rank() == 1) {
      if (!gave_up.wait_for(1)) rep.fail("rank 0's wait_for never returned");
      if (Status s = peer.all_reduce(t, ReduceOp::sum); !s) rep.fail("rank 1: " + s.to_string());
      return;
    }
    Work w = peer.all_reduce_async(t, ReduceOp::sum);
    Status early = w.wait_for(30ms);
    if (early.code() != Errc::timeout || early.message().find("still in flight") == std::string::npos)
      rep.fail("wait_for before the other peer called: " + early.to_string());
    if (w.test()) rep.fail("test() is true before the other peer called");
    gave_up.raise();
    if (Status s = w.wait(); !s) rep.fail("wait after the other peer called: " + s.to_string());
    if (t.to_vector<float>() != filled(6, 3.0f)) rep.fail("the op's result");
  });
  rep.expect_clean();
}

// A Work dropped at once still completes its op: the buffer holds the result once a later op of
// the same handle (which runs after it) is done.
TEST(Work, ADroppedWorkStillCompletesItsOp) {
  Runtime rt;
  Reporter rep;
  harness::run_peers(rt, harness::config_for(2), [&](Peer& peer) {
    Tensor dropped = Tensor::from(filled(10, 2.0f));
    (void)peer.all_reduce_async(dropped, ReduceOp::sum);
    Tensor next = Tensor::from(filled(3, 1.0f));
    if (Status s = peer.all_reduce(next, ReduceOp::sum); !s) rep.fail(s.to_string());
    if (dropped.to_vector<float>() != filled(10, 4.0f)) rep.fail("the dropped Work's op did not complete");
    if (next.to_vector<float>() != filled(3, 2.0f)) rep.fail("the next op's result");
  });
  rep.expect_clean();
}

// A disagreement in an op in flight reaches every peer's Work with the same specific error, and
// the ops after it still run.
TEST(Work, AShapeMismatchReachesEveryWork) {
  constexpr uint32_t n = 3;
  Runtime rt;
  Reporter rep;
  harness::run_peers(rt, harness::config_for(n), [&](Peer& peer) {
    Tensor bad = Tensor::from(filled(peer.rank() == 2 ? 5 : 4, 1.0f));
    Tensor good = Tensor::from(filled(4, 1.0f));
    Work w1 = peer.all_reduce_async(bad, ReduceOp::sum);
    Work w2 = peer.all_reduce_async(good, ReduceOp::sum);
    Status s1 = w1.wait();
    if (s1.code() != Errc::shape_mismatch) rep.fail("rank " + std::to_string(peer.rank()) + ": " + s1.to_string());
    if (Status s2 = w2.wait(); !s2) rep.fail("the op after the failed one: " + s2.to_string());
    if (good.to_vector<float>() != filled(4, 3.0f)) rep.fail("the op after the failed one: its result");
    auto r = w1.result();
    if (r || r.status().code() != Errc::shape_mismatch) rep.fail("result() of a failed op gives its error");
  });
  rep.expect_clean();
}

// OpOptions::timeout overrides Config::timeout (10 s here): an op whose other peer never calls
// fails with a timeout naming it, long before the config's bound.
TEST(Work, APerOpTimeoutOverridesTheConfig) {
  Runtime rt;
  Reporter rep;
  EventCount failed;
  harness::run_peers(rt, harness::config_for(2, "auto", 10000), [&](Peer& peer) {
    if (peer.rank() == 1) {
      if (!failed.wait_for(1, 8s)) rep.fail("rank 0's op did not end");
      return;
    }
    Tensor t = Tensor::from(filled(4, 1.0f));
    Work w = peer.all_reduce_async(t, ReduceOp::sum, OpOptions{.timeout = 200ms});
    Status s = w.wait_for(5s);  // within half the config's timeout
    if (s.code() != Errc::timeout || s.message().find("peer 1 never called within 200 ms") == std::string::npos)
      rep.fail("the op with a 200 ms timeout: " + s.to_string());
    failed.raise();
  });
  rep.expect_clean();
}

// Ops of different handles run concurrently: rank 0 hands in an op of group A, then one of
// group B; rank 1 calls B first, blocking, then A. Were a peer's groups one line, rank 0's B
// would wait behind its A and rank 1 never get to A.
TEST(Work, GroupsOfOnePeerRunConcurrently) {
  Runtime rt;
  Reporter rep;
  harness::run_peers(rt, harness::config_for(2), [&](Peer& peer) {
    auto a = peer.new_group({0, 1});
    auto b = peer.new_group({0, 1});
    if (!a || !b) {
      rep.fail("new_group: " + (a ? b.status() : a.status()).to_string());
      return;
    }
    Tensor ta = Tensor::from(filled(4, 1.0f)), tb = Tensor::from(filled(4, 10.0f));
    if (peer.rank() == 0) {
      Work wa = a->all_reduce_async(ta, ReduceOp::sum);
      Work wb = b->all_reduce_async(tb, ReduceOp::sum);
      if (Status s = wb.wait(); !s) rep.fail("group B on rank 0: " + s.to_string());
      if (Status s = wa.wait(); !s) rep.fail("group A on rank 0: " + s.to_string());
    } else {
      if (Status s = b->all_reduce(tb, ReduceOp::sum); !s) rep.fail("group B on rank 1: " + s.to_string());
      if (Status s = a->all_reduce(ta, ReduceOp::sum); !s) rep.fail("group A on rank 1: " + s.to_string());
    }
    if (ta.to_vector<float>() != filled(4, 2.0f) || tb.to_vector<float>() != filled(4, 20.0f))
      rep.fail("the groups' results");
    (void)a->destroy();
    (void)b->destroy();
  });
  rep.expect_clean();
}

// Each peer sends to the other and receives from it, both non-blocking, then waits: the exchange
// meets (a send waits for its receive, so one line per peer would hang). Two sends of one tag
// arrive in order.
TEST(Work, NonBlockingSendsAndReceivesExchange) {
  Runtime rt;
  Reporter rep;
  harness::run_peers(rt, harness::config_for(2), [&](Peer& peer) {
    const uint32_t other = 1 - peer.rank();
    Tensor out1 = Tensor::from(filled(5, 1.0f + peer.rank())), out2 = Tensor::from(filled(5, 10.0f + peer.rank()));
    Tensor in1 = Tensor::zeros(DType::f32, {5}), in2 = Tensor::zeros(DType::f32, {5});
    std::vector<Work> w;
    w.push_back(peer.send_async(out1, other, 7));
    w.push_back(peer.send_async(out2, other, 7));
    w.push_back(peer.recv_async(in1, other, 7));
    w.push_back(peer.recv_async(in2, other, 7));
    for (auto& x : w)
      if (Status s = x.wait(); !s) rep.fail("rank " + std::to_string(peer.rank()) + ": " + s.to_string());
    if (in1.to_vector<float>() != filled(5, 1.0f + other) || in2.to_vector<float>() != filled(5, 10.0f + other))
      rep.fail("rank " + std::to_string(peer.rank()) + " received the wrong messages, or out of order");
    auto got = w[2].result();
    if (!got || got->size() != 1 || (*got)[0].data() != in1.data()) rep.fail("recv's result is its buffer");
  });
  rep.expect_clean();
}

// A host send or receive whose partner is already waiting (in one process, up to
// CHORUS_P2P_LOCAL_EAGER_KIB) is done when its call returns: the pair was copied as it was made,
// with no task on its lane. Once with the receive posted first (tag 3), once with the send (tag 4):
// the half that comes first is not done until its partner comes.
TEST(Work, ASendOrReceiveWhosePartnerWaitsIsDoneAtItsCall) {
  Runtime rt;
  Reporter rep;
  WaitWord step;
  harness::run_peers(rt, harness::config_for(2), [&](Peer& peer) {
    Tensor m = Tensor::from(filled(4, 7.0f)), n = Tensor::from(filled(4, 8.0f));
    if (peer.rank() == 1) {
      if (!step.wait_at_least(1, Clock::now() + 10s)) return rep.fail("rank 0 never posted its receive");
      Work sent = peer.send_async(m, 0, 3);
      if (!sent.test()) rep.fail("a send to a posted receive was not done at its call");
      Work first = peer.send_async(n, 0, 4);
      if (first.test()) rep.fail("a send was done before its receive was called");
      step.set(2);
      for (Work* w : {&sent, &first})
        if (Status s = w->wait(); !s) rep.fail("rank 1: " + s.to_string());
      return;
    }
    Tensor got = Tensor::zeros(DType::f32, {4}), got2 = Tensor::zeros(DType::f32, {4});
    Work first = peer.recv_async(got, 1, 3);
    step.set(1);
    if (Status s = first.wait(); !s) rep.fail("rank 0: " + s.to_string());
    if (got.to_vector<float>() != filled(4, 7.0f)) rep.fail("the receive posted first got other data");
    if (!step.wait_at_least(2, Clock::now() + 10s)) return rep.fail("rank 1 never sent");
    Work second = peer.recv_async(got2, 1, 4);
    if (!second.test()) rep.fail("a receive of a waiting send was not done at its call");
    else if (got2.to_vector<float>() != filled(4, 8.0f)) rep.fail("the receive done at its call got other data");
    if (Status s = second.wait(); !s) rep.fail("rank 0, second: " + s.to_string());
    if (auto src = second.source(); !src || *src != 1) rep.fail("the receive done at its call names its sender wrongly");
  });
  rep.expect_clean();
}

// A blocking send called after a non-blocking one of its lane (same destination and tag) still
// arrives second, though each enters the server at its call.
TEST(Work, ABlockingSendAfterANonBlockingOneOfItsLaneArrivesSecond) {
  Runtime rt;
  Reporter rep;
  WaitWord posted;
  harness::run_peers(rt, harness::config_for(2), [&](Peer& peer) {
    if (peer.rank() == 0) {
      Tensor a = Tensor::from(filled(3, 1.0f)), b = Tensor::from(filled(3, 2.0f));
      Work first = peer.send_async(a, 1, 6);
      posted.set(1);
      if (Status s = peer.send(b, 1, 6); !s) rep.fail("the blocking send: " + s.to_string());
      if (Status s = first.wait(); !s) rep.fail("the non-blocking send: " + s.to_string());
      return;
    }
    if (!posted.wait_at_least(1, Clock::now() + 10s)) return rep.fail("rank 0 never sent");
    Tensor x = Tensor::zeros(DType::f32, {3}), y = Tensor::zeros(DType::f32, {3});
    for (Tensor* t : {&x, &y})
      if (Status s = peer.recv(*t, 0, 6); !s) rep.fail("recv: " + s.to_string());
    if (x.to_vector<float>() != filled(3, 1.0f) || y.to_vector<float>() != filled(3, 2.0f))
      rep.fail("the receives got " + std::to_string(x.data_as<float>()[0]) + " and " +
               std::to_string(y.data_as<float>()[0]) + ", not 1 and 2");
  });
  rep.expect_clean();
}

// A non-blocking send nobody receives fails in its own timeout, naming the receive that never
// came; the other peer's later ops are unaffected.
TEST(Work, ASendNobodyReceivesFailsInItsTimeout) {
  Runtime rt;
  Reporter rep;
  EventCount failed;
  harness::run_peers(rt, harness::config_for(2), [&](Peer& peer) {
    Tensor t = Tensor::from(filled(2, 1.0f));
    if (peer.rank() == 0) {
      Status s = peer.send_async(t, 1, 11, OpOptions{.timeout = 200ms}).wait();
      if (s.code() != Errc::timeout || s.message().find("send 0->1") == std::string::npos ||
          s.message().find("never posted the matching recv") == std::string::npos)
        rep.fail("the unreceived send: " + s.to_string());
      failed.raise();
    } else if (!failed.wait_for(1, 30s)) {
      return rep.fail("the unreceived send never failed");
    }
    if (Status s = peer.all_reduce(t, ReduceOp::sum); !s) rep.fail("the op after: " + s.to_string());
  });
  rep.expect_clean();
}

// A callback runs once, with the op's Status: on the completing thread for an op in flight, at
// once for one already done.
TEST(Work, CallbacksRunOnceWithTheStatus) {
  Runtime rt;
  Reporter rep;
  std::atomic<int> calls{0}, ok_calls{0};
  EventCount called;
  harness::run_peers(rt, harness::config_for(2), [&](Peer& peer) {
    Tensor t = Tensor::from(filled(4, 1.0f));
    Work w = peer.all_reduce_async(t, ReduceOp::sum);
    w.on_complete([&](const Status& s) {
      ++calls;
      if (s) ++ok_calls;
      called.raise();
    });
    if (Status s = w.wait(); !s) rep.fail(s.to_string());
    const auto me = std::this_thread::get_id();
    std::thread::id ran_on;
    w.on_complete([&](const Status& s) {
      ran_on = std::this_thread::get_id();
      if (!s) rep.fail("the late callback's status: " + s.to_string());
    });
    if (ran_on != me) rep.fail("a callback on a done Work did not run at once on the caller's thread");
  });
  EXPECT_TRUE(called.wait_for(2));
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(ok_calls.load(), 2);
  rep.expect_clean();
}

// An op of a handle called from a callback of one of its Works is refused: where it would run
// among the handle's ops would depend on timing. (The callback is registered before the other
// peer calls, so it runs on the thread that completes the op.)
TEST(Work, AnOpFromACallbackOfItsOwnHandleIsRefused) {
  Runtime rt;
  Reporter rep;
  EventCount registered, called_back;
  Status from_callback;
  harness::run_peers(rt, harness::config_for(2), [&](Peer& peer) {
    Tensor t = Tensor::from(filled(4, 1.0f));
    if (peer.rank() == 1) {
      if (!registered.wait_for(1)) rep.fail("rank 0 never registered its callback");
      if (Status s = peer.all_reduce(t, ReduceOp::sum); !s) rep.fail("rank 1: " + s.to_string());
      return;
    }
    Work w = peer.all_reduce_async(t, ReduceOp::sum);
    w.on_complete([&](const Status&) {
      from_callback = peer.barrier();
      called_back.raise();
    });
    registered.raise();
    if (Status s = w.wait(); !s) rep.fail("rank 0: " + s.to_string());
    if (!called_back.wait_for(1)) rep.fail("the callback never ran");
  });
  EXPECT_EQ(from_callback.code(), Errc::invalid_argument) << from_callback.to_string();
  EXPECT_NE(from_callback.message().find("callback"), std::string::npos) << from_callback.to_string();
  rep.expect_clean();
}

// A wait, from a callback of one of a handle's Works, for a later op of the same handle is refused:
// that op starts only once the op whose callback runs has returned, so the wait would never end.
// The op itself still runs. (Registered before the other peer calls, as above.)
TEST(Work, AWaitFromACallbackForALaterOpOfItsOwnHandleIsRefused) {
  Runtime rt;
  Reporter rep;
  EventCount registered, called_back;
  Status from_callback;
  harness::run_peers(rt, harness::config_for(2), [&](Peer& peer) {
    Tensor t = Tensor::from(filled(4, 1.0f)), u = Tensor::from(filled(4, 3.0f));
    if (peer.rank() == 1) {
      if (!registered.wait_for(1)) rep.fail("rank 0 never registered its callback");
      if (Status s = peer.all_reduce(t, ReduceOp::sum); !s) rep.fail("rank 1, first: " + s.to_string());
      if (Status s = peer.all_reduce(u, ReduceOp::sum); !s) rep.fail("rank 1, second: " + s.to_string());
      return;
    }
    Work first = peer.all_reduce_async(t, ReduceOp::sum);
    Work second = peer.all_reduce_async(u, ReduceOp::sum);
    first.on_complete([&](const Status&) {
      from_callback = second.wait();
      called_back.raise();
    });
    registered.raise();
    if (!called_back.wait_for(1, 60s)) return rep.fail("the callback's wait never ended");
    if (Status s = second.wait(); !s) rep.fail("rank 0, second: " + s.to_string());
    if (u.to_vector<float>() != filled(4, 6.0f)) rep.fail("the second op's result");
  });
  EXPECT_EQ(from_callback.code(), Errc::invalid_argument) << from_callback.to_string();
  EXPECT_NE(from_callback.message().find("would never end"), std::string::npos) << from_callback.to_string();
  rep.expect_clean();
}

// finish() from a callback of a receive's Work is refused as an op is (it would wait for the
// receive's lane, which runs the callback), not left to wait for itself. (A receive completes only
// once the sender sent, after the callback was registered: it runs on the thread that completes it.)
TEST(Work, FinishFromACallbackOfItsOwnHandleIsRefused) {
  Runtime rt;
  Reporter rep;
  EventCount registered, called_back;
  Status from_callback;
  harness::run_peers(rt, harness::config_for(2), [&](Peer& peer) {
    Tensor m = Tensor::from(filled(3, peer.rank() == 1 ? 5.0f : 0.0f));
    if (peer.rank() == 1) {
      if (!registered.wait_for(1)) rep.fail("rank 0 never registered its callback");
      if (Status s = peer.send(m, 0, 9); !s) rep.fail("rank 1: " + s.to_string());
      return;
    }
    Work w = peer.recv_async(m, 1, 9);
    w.on_complete([&](const Status&) {
      from_callback = peer.finish();
      called_back.raise();
    });
    registered.raise();
    if (Status s = w.wait(); !s) rep.fail("rank 0: " + s.to_string());
    if (!called_back.wait_for(1, 60s)) rep.fail("finish from the callback never returned");
    if (m.to_vector<float>() != filled(3, 5.0f)) rep.fail("the message");
  });
  EXPECT_EQ(from_callback.code(), Errc::invalid_argument) << from_callback.to_string();
  EXPECT_NE(from_callback.message().find("callback"), std::string::npos) << from_callback.to_string();
  rep.expect_clean();
}

// finish() leaves only after every op handed in before it, its sends and receives included; an
// op after it fails.
TEST(Work, FinishWaitsForEveryOpBeforeIt) {
  Runtime rt;
  Reporter rep;
  const Config cfg = harness::config_for(2);
  std::vector<std::thread> threads;
  for (uint32_t p = 0; p < 2; ++p)
    threads.emplace_back([&, p] {
      auto peer = rt.register_peer(p, cfg);
      if (!peer) return rep.fail(peer.status().to_string());
      Tensor t = Tensor::from(filled(4, 2.0f));
      Tensor m = Tensor::from(filled(3, p == 0 ? 5.0f : 0.0f));
      Work wa = peer->all_reduce_async(t, ReduceOp::sum);
      Work wm = p == 0 ? peer->send_async(m, 1, 4) : peer->recv_async(m, 0, 4);
      if (Status s = peer->finish(); !s) rep.fail("finish: " + s.to_string());
      if (!wa.test() || !wm.test()) rep.fail("finish returned before an op handed in before it was done");
      if (Status s = wa.wait(); !s) rep.fail("the all_reduce before finish: " + s.to_string());
      if (Status s = wm.wait(); !s) rep.fail("the send/recv before finish: " + s.to_string());
      if (t.to_vector<float>() != filled(4, 4.0f)) rep.fail("the all_reduce's result");
      if (m.to_vector<float>() != filled(3, 5.0f)) rep.fail("the message");
      if (Status s = peer->barrier_async().wait(); s.code() != Errc::finished) rep.fail("an op after finish: " + s.to_string());
    });
  for (auto& t : threads) t.join();
  rep.expect_clean();
}

TEST(Work, EmptyHandlesSaySo) {
  Work none;
  EXPECT_FALSE(none.valid());
  EXPECT_FALSE(none.test());
  EXPECT_EQ(none.wait().code(), Errc::invalid_argument);
  Peer unregistered;
  Tensor t = Tensor::from(filled(2, 1.0f));
  Work w = unregistered.all_reduce_async(t, ReduceOp::sum);
  EXPECT_TRUE(w.test());
  EXPECT_EQ(w.wait().code(), Errc::not_registered);
  EXPECT_EQ(unregistered.all_reduce(t, ReduceOp::sum).code(), Errc::not_registered);
  for (Work x : {unregistered.send_async(t, 1, 2), unregistered.recv_async(t, 1, 2), unregistered.recv_any_async(t, 2)}) {
    EXPECT_TRUE(x.test());
    EXPECT_EQ(x.wait().code(), Errc::not_registered);
  }
}

} // namespace
} // namespace chorus
