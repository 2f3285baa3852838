// Ops ordered in a CUDA stream (OpOptions::stream), against the double of the stream calls
// (fake_streams.hpp): an op starts only once the stream's earlier work is done, the stream goes on
// only once the op is done (and sees its result), however the op ends; a stream's earlier work
// that never finishes fails the op within its timeout. Without the double, an op given a stream
// where no GPU is fails with device_error (on a GPU, it runs ordered in the legacy stream).
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "collective_cases.hpp"
#include "cuda/gpu.hpp"
#include "fake_streams.hpp"
#include "peer_harness.hpp"
#include "test_events.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;
using namespace testing;

std::vector<float> filled(std::size_t n, float v) { return std::vector<float>(n, v); }

// Both peers hand in an op while their streams are still busy: the op waits at its start line,
// touching nothing, and the calls return at once; once the streams' work is done it runs, and
// each stream is let go on only after the result is in place.
TEST(StreamOrder, TheOpStartsAfterTheStreamsEarlierWorkAndTheStreamWaitsForIt) {
  fake::StreamsDoubleInPlace streams;
  fake::FakeStream s[2];
  std::vector<float> seen[2];
  for (auto& st : s) st.hold_earlier_work();
  Runtime rt;
  Reporter rep;
  EventCount handed_in;
  harness::run_peers(rt, harness::config_for(2), [&](Peer& peer) {
    const uint32_t r = peer.rank();
    Tensor t = Tensor::from(filled(4, static_cast<float>(r + 1)));
    s[r].on_release([&, r] { seen[r] = t.to_vector<float>(); });
    Work w = peer.all_reduce_async(t, ReduceOp::sum, OpOptions{.stream = &s[r]});
    if (!s[r].wait_until_waiting(1, 5s)) rep.fail("rank " + std::to_string(r) + ": the op never reached its start line");
    if (w.test()) rep.fail("the op is done before its stream's earlier work");
    if (t.to_vector<float>() != filled(4, static_cast<float>(r + 1))) rep.fail("the op touched its tensor before its start");
    if (!s[r].released().empty()) rep.fail("the stream went on before the op");
    handed_in.raise();
    if (!handed_in.wait_for(2, 5s)) rep.fail("the other peer never handed its op in");
    s[r].finish_earlier_work();
    if (Status st = w.wait(); !st) rep.fail("rank " + std::to_string(r) + ": " + st.to_string());
    if (t.to_vector<float>() != filled(4, 3.0f)) rep.fail("the result");
    if (s[r].released() != std::vector<uint32_t>{1}) rep.fail("the stream was not let go on exactly once");
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(seen[r], filled(4, 3.0f)) << "what the stream's later work sees, rank " << r;
  rep.expect_clean();
}

// Many ops in a row on one stream each: every one let go on in order, every result right.
TEST(StreamOrder, OpsInARowAreLetGoOnInOrder) {
  fake::StreamsDoubleInPlace streams;
  fake::FakeStream s[3];
  constexpr int kOps = 20;
  Runtime rt;
  Reporter rep;
  harness::run_peers(rt, harness::config_for(3), [&](Peer& peer) {
    const uint32_t r = peer.rank();
    std::vector<Tensor> ts;
    std::vector<Work> ws;
    for (int i = 0; i < kOps; ++i) ts.push_back(Tensor::from(filled(3, static_cast<float>(i + r))));
    for (int i = 0; i < kOps; ++i) ws.push_back(peer.all_reduce_async(ts[i], ReduceOp::sum, OpOptions{.stream = &s[r]}));
    for (int i = 0; i < kOps; ++i) {
      if (Status st = ws[i].wait(); !st) rep.fail("op " + std::to_string(i) + ": " + st.to_string());
      if (ts[i].to_vector<float>() != filled(3, static_cast<float>(3 * i + 3))) rep.fail("op " + std::to_string(i) + "'s result");
    }
    std::vector<uint32_t> want(kOps);
    for (int i = 0; i < kOps; ++i) want[i] = static_cast<uint32_t>(i + 1);
    if (s[r].released() != want) rep.fail("rank " + std::to_string(r) + ": the stream was not let go on in order");
  });
  rep.expect_clean();
}

// A failed op lets its stream go on too (a stream waiting for ever would hang the GPU's work).
TEST(StreamOrder, AFailedOpLetsItsStreamGoOn) {
  fake::StreamsDoubleInPlace streams;
  fake::FakeStream s[2];
  Runtime rt;
  Reporter rep;
  harness::run_peers(rt, harness::config_for(2), [&](Peer& peer) {
    const uint32_t r = peer.rank();
    Tensor t = Tensor::from(filled(r == 0 ? 4 : 5, 1.0f));
    Status st = peer.all_reduce_async(t, ReduceOp::sum, OpOptions{.stream = &s[r]}).wait();
    if (st.code() != Errc::shape_mismatch) rep.fail("rank " + std::to_string(r) + ": " + st.to_string());
    if (s[r].released() != std::vector<uint32_t>{1}) rep.fail("rank " + std::to_string(r) + ": the stream still waits");
  });
  rep.expect_clean();
}

// A stream whose earlier work never finishes: the op fails within its own timeout, and still takes
// its place, so the other peer's op fails at once with the same cause, naming it; both streams go
// on, and the next op of both lines up.
TEST(StreamOrder, EarlierWorkThatNeverFinishesFailsTheOpInTime) {
  fake::StreamsDoubleInPlace streams;
  fake::FakeStream s[2];
  s[1].hold_earlier_work();
  Runtime rt;
  Reporter rep;
  harness::run_peers(rt, harness::config_for(2, "auto", 10000), [&](Peer& peer) {
    const uint32_t r = peer.rank();
    Tensor t = Tensor::from(filled(4, 1.0f));
    const auto bound = r == 1 ? 300ms : 5000ms;  // rank 0 waits longer than rank 1's stream
    Status st = peer.all_reduce_async(t, ReduceOp::sum, OpOptions{.timeout = bound, .stream = &s[r]}).wait_for(4s);
    if (st.code() != Errc::timeout) rep.fail("rank " + std::to_string(r) + ": " + st.to_string());
    if (st.message().find("peer 1 could not take part: the work queued on OpOptions::stream before the op did not finish") ==
        std::string::npos)
      rep.fail("rank " + std::to_string(r) + "'s error: " + st.message());
    if (s[r].released() != std::vector<uint32_t>{1}) rep.fail("rank " + std::to_string(r) + ": the stream still waits");
    if (r == 1) s[1].finish_earlier_work();
    Tensor next = Tensor::from(filled(2, 1.0f));
    if (Status n = peer.all_reduce(next, ReduceOp::sum); !n || next.to_vector<float>() != filled(2, 2.0f))
      rep.fail("rank " + std::to_string(r) + "'s next op: " + n.to_string());
  });
  rep.expect_clean();
}

// One stream's ops run in the order they were handed in, each after the one before is let go on
// (its start line follows the earlier op's wait, as on a GPU). An exchange of a send and a recv on
// each peer's one stream therefore works when the peers order it alike (rank 0 sends first, rank 1
// receives first)...
TEST(StreamOrder, AnExchangeOrderedAlikeOnOneStreamEachRuns) {
  fake::StreamsDoubleInPlace streams;
  fake::FakeStream s[2];
  Runtime rt;
  Reporter rep;
  harness::run_peers(rt, harness::config_for(2), [&](Peer& peer) {
    const uint32_t r = peer.rank();
    Tensor out = Tensor::from(filled(3, 10.0f + r)), in = Tensor::zeros(DType::f32, {3});
    std::vector<Work> w;
    const OpOptions o{.stream = &s[r]};
    if (r == 0) {
      w.push_back(peer.send_async(out, 1, 7, o));
      w.push_back(peer.recv_async(in, 1, 7, o));
    } else {
      w.push_back(peer.recv_async(in, 0, 7, o));
      w.push_back(peer.send_async(out, 0, 7, o));
    }
    for (auto& x : w)
      if (Status st = x.wait(); !st) rep.fail("rank " + std::to_string(r) + ": " + st.to_string());
    if (in.to_vector<float>() != filled(3, 10.0f + (1 - r))) rep.fail("rank " + std::to_string(r) + " received wrong data");
    if (s[r].released() != std::vector<uint32_t>({1, 2})) rep.fail("rank " + std::to_string(r) + ": the stream's releases");
  });
  rep.expect_clean();
}

// Rank 0 calls two ops of one lane (rank 1, tag 4), the first ordered in a stream whose earlier
// work is held, the second on the host; rank 1 then calls the matching two blocking. `sends`:
// rank 0's are sends, else receives. Host ops are otherwise posted at their call, but the second
// enters the local server after the first, when its stream lets it start: 1 lands before 2.
void expect_the_host_op_behind_the_stream_ordered_one(bool sends) {
  fake::StreamsDoubleInPlace streams;
  fake::FakeStream s;
  s.hold_earlier_work();
  Runtime rt;
  Reporter rep;
  WaitWord posted;
  harness::run_peers(rt, harness::config_for(2), [&](Peer& peer) {
    const bool sender = (peer.rank() == 0) == sends;
    Tensor first = Tensor::from(filled(3, sender ? 1.0f : 0.0f)), second = Tensor::from(filled(3, sender ? 2.0f : 0.0f));
    auto call = [&](Tensor& t, OpOptions o) {
      return sender ? peer.send_async(t, 1 - peer.rank(), 4, o) : peer.recv_async(t, 1 - peer.rank(), 4, o);
    };
    if (peer.rank() == 0) {
      Work a = call(first, OpOptions{.stream = &s});
      Work b = call(second, {});
      posted.set(1);
      s.finish_earlier_work();
      for (Work* w : {&a, &b})
        if (Status st = w->wait(); !st) rep.fail("rank 0: " + st.to_string());
    } else {
      if (!posted.wait_at_least(1, Clock::now() + 10s)) return rep.fail("rank 0 never called");
      for (Tensor* t : {&first, &second})
        if (Status st = call(*t, {}).wait(); !st) rep.fail("rank 1: " + st.to_string());
    }
    if (!sender && (first.to_vector<float>() != filled(3, 1.0f) || second.to_vector<float>() != filled(3, 2.0f)))
      rep.fail("the receives got " + std::to_string(first.data_as<float>()[0]) + " and " +
               std::to_string(second.data_as<float>()[0]) + ", not 1 and 2");
  });
  rep.expect_clean();
}

TEST(StreamOrder, AHostReceiveDoesNotOvertakeAStreamOrderedOneOfItsLane) {
  expect_the_host_op_behind_the_stream_ordered_one(false);
}

TEST(StreamOrder, AHostSendDoesNotOvertakeAStreamOrderedOneOfItsLane) {
  expect_the_host_op_behind_the_stream_ordered_one(true);
}

// ... and when both send first, each recv waits on its stream for its own send, which waits for
// the other's recv (NCCL would hang so without a group). The cycle breaks at a recv's timeout: that
// recv, unable to start, takes its place failing, which fails the send it pairs with, naming the
// cause; that send's stream then goes on, and the other pair may still meet. No Work hangs, every
// stream goes on, and whatever arrived is the sender's data.
TEST(StreamOrder, ACycleThroughStreamsBreaksAtARecvsTimeout) {
  fake::StreamsDoubleInPlace streams;
  fake::FakeStream s[2];
  std::atomic<int> named_cause{0};
  Runtime rt;
  Reporter rep;
  harness::run_peers(rt, harness::config_for(2), [&](Peer& peer) {
    const uint32_t r = peer.rank();
    Tensor out = Tensor::from(filled(3, 10.0f + r)), in = Tensor::zeros(DType::f32, {3});
    Work sent = peer.send_async(out, 1 - r, 7, OpOptions{.timeout = 5000ms, .stream = &s[r]});
    Work got = peer.recv_async(in, 1 - r, 7, OpOptions{.timeout = 300ms, .stream = &s[r]});
    for (Work* x : {&sent, &got}) {
      Status st = x->wait_for(4s);
      if (!x->test()) rep.fail("rank " + std::to_string(r) + ": an op of the cycle still runs: " + st.to_string());
      if (st.code() == Errc::timeout &&
          st.message().find("the work queued on OpOptions::stream before the op did not finish") != std::string::npos)
        ++named_cause;
      else if (!st.is_ok())
        rep.fail("rank " + std::to_string(r) + ": " + st.to_string());
    }
    const auto v = in.to_vector<float>();
    if (v != filled(3, 0.0f) && v != filled(3, 10.0f + (1 - r))) rep.fail("rank " + std::to_string(r) + " received other data");
    if (got.wait().is_ok() != (v != filled(3, 0.0f))) rep.fail("rank " + std::to_string(r) + ": data without success, or none with");
    if (s[r].released().size() != 2) rep.fail("rank " + std::to_string(r) + ": a stream still waits");
  });
  EXPECT_GE(named_cause.load(), 2) << "a recv that could not start and the send it pairs with, both naming why";
  rep.expect_clean();
}

// A stream the calls refuse: that peer's Work fails at once with their error, nothing is queued.
TEST(StreamOrder, AStreamTheCallsRefuseFailsTheWorkAtOnce) {
  fake::StreamsDoubleInPlace streams;
  streams.calls.fail_enqueues_with({Errc::device_error, "cudaStreamGetDevice: not a stream"});
  fake::FakeStream s;
  Runtime rt;
  auto peer = rt.register_peer(0, harness::config_for(1));
  ASSERT_TRUE(peer.is_ok());
  Tensor t = Tensor::from(filled(2, 1.0f));
  Work w = peer->all_reduce_async(t, ReduceOp::sum, OpOptions{.stream = &s});
  ASSERT_TRUE(w.test());
  EXPECT_EQ(w.wait().code(), Errc::device_error);
  EXPECT_NE(w.wait().message().find("not a stream"), std::string::npos);
  EXPECT_EQ(s.marks(), 0);
  EXPECT_TRUE(peer->finish().is_ok());
}

// The CUDA calls themselves: where no GPU is, a stream cannot be ordered in (device_error naming
// the stream); on a GPU, the legacy stream orders the op and it runs.
TEST(StreamOrder, TheRealCallsRefuseWithoutAGpuAndOrderOnOne) {
  void* legacy = reinterpret_cast<void*>(0x1);  // cudaStreamLegacy
  Runtime rt;
  auto peer = rt.register_peer(0, harness::config_for(1));
  ASSERT_TRUE(peer.is_ok());
  Tensor t = Tensor::from(filled(2, 1.0f));
  Status st = peer->all_reduce_async(t, ReduceOp::sum, OpOptions{.stream = legacy}).wait();
  if (gpu::device_count() == 0) {
    EXPECT_EQ(st.code(), Errc::device_error) << st.to_string();
    EXPECT_NE(st.message().find("OpOptions::stream"), std::string::npos) << st.to_string();
  } else {
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(t.to_vector<float>(), filled(2, 1.0f));
  }
  EXPECT_TRUE(peer->finish().is_ok());
}

} // namespace
} // namespace chorus
