// Point to point through the blocking Peer API: tags, FIFO order per (source, destination, tag)
// with either side queued at the server, and sends interleaved with collectives.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "collective_cases.hpp"
#include "peer_harness.hpp"
#include "test_events.hpp"

namespace chorus {
namespace {

using namespace testing;

// Two sends of one peer with different tags, in flight at once: the receiver takes them in the
// opposite order, and each recv gets the message of its own tag. (The sends come from two threads
// of peer 0, since a blocking send returns only once its message has been received.)
TEST(SendRecv, TagsAreMatchedIndependently) {
  Runtime rt;
  Reporter rep;
  EventCount entered;
  count_server_entries(rt, entered);
  const std::vector<float> a = {1.5f, -2.25f, 3, 4, 5, 6, 7};
  const std::vector<int64_t> b = {-1, 1ll << 40, 42};
  harness::run_peers(rt, harness::config_for(2), [&](Peer& peer) {
    if (peer.id() == 0) {
      std::thread t1([&] {
        Status s = peer.send(Tensor::from(a), 1, 1);
        if (!s) rep.fail("send tag 1: " + s.to_string());
      });
      std::thread t2([&] {
        Status s = peer.send(Tensor::from(b), 1, 2);
        if (!s) rep.fail("send tag 2: " + s.to_string());
      });
      t1.join();
      t2.join();
    } else {
      if (!entered.wait_for(2)) rep.fail("the two sends did not reach the server");  // both in flight
      Tensor rb = Tensor::zeros(DType::i64, {3});
      Status s = peer.recv(rb, 0, 2);
      if (!s) rep.fail("recv tag 2: " + s.to_string());
      else if (rb.to_vector<int64_t>() != b) rep.fail("recv tag 2 got the wrong message");
      Tensor ra = Tensor::zeros(DType::f32, {7});
      s = peer.recv(ra, 0, 1);
      if (!s) rep.fail("recv tag 1: " + s.to_string());
      else if (ra.to_vector<float>() != a) rep.fail("recv tag 1 got the wrong message");
    }
  });
  rep.expect_clean();
}

// FIFO per (source, destination, tag): sends posted in order X, Y (from two threads, Y once X
// waits at the server) are received in that order; likewise two recvs posted in order get the
// sends in order. A peer's calls of one (direction, other peer, tag) share a lane
// (runtime/peer/op_lanes.hpp), so Y reaches the server once X is received: the server's own FIFO
// with both queued is CoreTest.SendRecvAreMatchedFifoPerTag's.
TEST(SendRecv, FifoPerTagFromSeveralThreads) {
  Runtime rt;
  Reporter rep;
  EventCount entered;  // op requests the server has taken in: only the ones below
  count_server_entries(rt, entered);
  auto wait_entered = [&](uint32_t n, const char* what) {
    if (!entered.wait_for(n)) rep.fail(std::string(what) + " did not reach the server");
  };
  const std::vector<int32_t> X = {10, 11, 12}, Y = {20, 21, 22};
  // Sends queued first.
  harness::run_peers(rt, harness::config_for(3), [&](Peer& peer) {
    if (peer.id() == 2) {
      std::thread s1([&] { if (Status s = peer.send(Tensor::from(X), 0, 5); !s) rep.fail("send X: " + s.to_string()); });
      wait_entered(1, "send X");
      std::thread s2([&] { if (Status s = peer.send(Tensor::from(Y), 0, 5); !s) rep.fail("send Y: " + s.to_string()); });
      s1.join();
      s2.join();
    } else if (peer.id() == 0) {
      wait_entered(1, "send X");
      for (const auto* want : {&X, &Y}) {
        Tensor r = Tensor::zeros(DType::i32, {3});
        Status s = peer.recv(r, 2, 5);
        if (!s) rep.fail("recv: " + s.to_string());
        else if (r.to_vector<int32_t>() != *want) rep.fail("sends queued at the server were received out of order");
      }
    }
  });
  // Recvs queued first.
  const uint32_t before = entered.count();  // the 4 requests above
  harness::run_peers(rt, harness::config_for(3), [&](Peer& peer) {
    if (peer.id() == 1) {
      Tensor rx = Tensor::zeros(DType::i32, {3}), ry = Tensor::zeros(DType::i32, {3});
      std::thread r1([&] { if (Status s = peer.recv(rx, 2, 5); !s) rep.fail("recv 1: " + s.to_string()); });
      wait_entered(before + 1, "recv 1");
      std::thread r2([&] { if (Status s = peer.recv(ry, 2, 5); !s) rep.fail("recv 2: " + s.to_string()); });
      r1.join();
      r2.join();
      if (rx.to_vector<int32_t>() != X || ry.to_vector<int32_t>() != Y)
        rep.fail("recvs queued at the server were matched out of order");
    } else if (peer.id() == 2) {
      wait_entered(before + 1, "recv 1");
      if (Status s = peer.send(Tensor::from(X), 1, 5); !s) rep.fail("send X: " + s.to_string());
      if (Status s = peer.send(Tensor::from(Y), 1, 5); !s) rep.fail("send Y: " + s.to_string());
    }
  });
  rep.expect_clean();
}

// A receive from any source takes the sends to it in the order they reached the server, from
// whichever peer, and names each sender (the blocking form returns it, Work::source() the async
// one); a plain recv's Work names its src.
TEST(SendRecv, ARecvFromAnySourceNamesItsSender) {
  Runtime rt;
  Reporter rep;
  EventCount entered;
  count_server_entries(rt, entered);
  const std::vector<int32_t> from1 = {1, 1, 1}, from2 = {2, 2, 2}, from3 = {3, 3, 3};
  harness::run_peers(rt, harness::config_for(4), [&](Peer& peer) {
    if (peer.id() == 2) {
      if (Status s = peer.send(Tensor::from(from2), 0, 4); !s) rep.fail("send from 2: " + s.to_string());
    } else if (peer.id() == 1) {
      if (!entered.wait_for(1)) rep.fail("peer 2's send did not reach the server");
      if (Status s = peer.send(Tensor::from(from1), 0, 4); !s) rep.fail("send from 1: " + s.to_string());
      if (Status s = peer.send(Tensor::from(from1), 3, 8); !s) rep.fail("send 1->3: " + s.to_string());
    } else if (peer.id() == 0) {
      if (!entered.wait_for(2)) rep.fail("the two sends did not reach the server");
      for (auto [want, data] : {std::pair{2u, &from2}, std::pair{1u, &from1}}) {
        Tensor r = Tensor::zeros(DType::i32, {3});
        auto got = peer.recv_any(r, 4);
        if (!got) rep.fail("recv_any: " + got.status().to_string());
        else if (*got != want) rep.fail("recv_any took rank " + std::to_string(*got) + " first, not " + std::to_string(want));
        else if (r.to_vector<int32_t>() != *data) rep.fail("recv_any got another rank's data");
      }
      Tensor r = Tensor::zeros(DType::i32, {3});
      Work w = peer.recv_any_async(r, 7);
      if (Status s = peer.send(Tensor::from(from1), 3, 7); !s) rep.fail("send 0->3: " + s.to_string());
      if (Status s = w.wait(); !s) rep.fail("recv_any_async: " + s.to_string());
      else if (auto src = w.source(); !src || *src != 3u) rep.fail("Work::source() did not name rank 3");
      else if (r.to_vector<int32_t>() != from3) rep.fail("recv_any_async got the wrong data");
    } else {
      if (!entered.wait_for(2)) rep.fail("the two sends did not reach the server");  // they enter first
      Tensor r = Tensor::zeros(DType::i32, {3});
      Work w = peer.recv_async(r, 1, 8);
      if (Status s = w.wait(); !s) rep.fail("recv from 1: " + s.to_string());
      else if (auto src = w.source(); !src || *src != 1u) rep.fail("a recv's Work::source() is not its src");
      Tensor got = Tensor::zeros(DType::i32, {3});
      Work r0 = peer.recv_async(got, 0, 7);
      if (Status s = peer.send(Tensor::from(from3), 0, 7); !s) rep.fail("send 3->0: " + s.to_string());
      if (Status s = r0.wait(); !s) rep.fail("recv from 0: " + s.to_string());
    }
  });
  rep.expect_clean();
}

// Messages up to CHORUS_P2P_LOCAL_EAGER_KIB (256 KiB unless set) are copied as their pair is
// made; larger ones run as a plan of the two, which the receiver copies: both kinds arrive whole,
// to a receive from its sender and to one from any source, each way round.
TEST(SendRecv, MessagesAboveTheEagerLimitArriveWholeToo) {
  Runtime rt;
  Reporter rep;
  const int64_t large = (256 << 10) / 4 + 1, small = 256;
  auto values = [](int64_t n, float base) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = base + static_cast<float>(i % 1000);
    return v;
  };
  harness::run_peers(rt, harness::config_for(2), [&](Peer& peer) {
    int tag = 0;
    for (int64_t n : {small, large})
      for (bool any : {false, true}) {
        ++tag;
        const std::vector<float> want = values(n, static_cast<float>(tag) * 1000);
        if (peer.id() == 0) {
          if (Status st = peer.send(Tensor::from(want), 1, tag); !st) rep.fail("send: " + st.to_string());
          continue;
        }
        Tensor got = Tensor::zeros(DType::f32, {n});
        Status st = any ? peer.recv_any(got, tag).status() : peer.recv(got, 0, tag);
        const std::string what = std::to_string(n * 4) + " B" + (any ? " from any source" : "");
        if (!st) rep.fail("recv of " + what + ": " + st.to_string());
        else if (got.to_vector<float>() != want) rep.fail("recv of " + what + " got other data");
        else if (peer.last_strategy() != "p2p") rep.fail("recv of " + what + " was not p2p");
      }
  });
  rep.expect_clean();
}

// MPI's order of posting: receives that may take the same sends take them in the order they were
// called, whichever lane each runs on. Peer 0 calls recv from 1, recv from 1 (queued behind the
// first on its lane) and recv from any source, all with tag 5; peer 1 then sends X, A, B: the
// second recv must get A, though the receive from any source reached the server before it could.
// Then the other way round, with tag 6: a receive from any source called first gets the first send.
TEST(SendRecv, ReceivesTakeSendsInTheOrderTheyWereCalled) {
  Runtime rt;
  Reporter rep;
  WaitWord posted;
  auto msg = [](int32_t v) { return std::vector<int32_t>{v, v}; };
  harness::run_peers(rt, harness::config_for(2), [&](Peer& peer) {
    if (peer.id() == 1) {
      for (uint32_t round = 1; round <= 2; ++round) {
        if (!posted.wait_at_least(round, Clock::now() + std::chrono::seconds(10))) return rep.fail("peer 0 never posted");
        for (int32_t v : round == 1 ? std::vector<int32_t>{10, 11, 12} : std::vector<int32_t>{20, 21})
          if (Status s = peer.send(Tensor::from(msg(v)), 0, round == 1 ? 5 : 6); !s) rep.fail("send: " + s.to_string());
      }
      return;
    }
    std::vector<Tensor> t;
    for (int i = 0; i < 5; ++i) t.push_back(Tensor::zeros(DType::i32, {2}));
    std::vector<Work> w;
    w.push_back(peer.recv_async(t[0], 1, 5));
    w.push_back(peer.recv_async(t[1], 1, 5));
    w.push_back(peer.recv_any_async(t[2], 5));
    posted.set(1);
    for (auto& x : w)
      if (Status s = x.wait(); !s) rep.fail("receive: " + s.to_string());
    if (t[0].to_vector<int32_t>() != msg(10) || t[1].to_vector<int32_t>() != msg(11) || t[2].to_vector<int32_t>() != msg(12))
      rep.fail("tag 5: the receives got " + std::to_string(t[0].data_as<int32_t>()[0]) + ", " +
               std::to_string(t[1].data_as<int32_t>()[0]) + ", " + std::to_string(t[2].data_as<int32_t>()[0]) +
               ", not 10, 11, 12");
    Work any = peer.recv_any_async(t[3], 6);
    Work from1 = peer.recv_async(t[4], 1, 6);
    posted.set(2);
    if (Status s = any.wait(); !s) rep.fail("receive from any source: " + s.to_string());
    if (Status s = from1.wait(); !s) rep.fail("receive from 1: " + s.to_string());
    if (t[3].to_vector<int32_t>() != msg(20) || t[4].to_vector<int32_t>() != msg(21))
      rep.fail("tag 6: the receive from any source got " + std::to_string(t[3].data_as<int32_t>()[0]) + ", not 20");
  });
  rep.expect_clean();
}

// A receive posted behind others takes what none of them may take at once: peer 0 posts two
// receives from peer 1 (the second queued behind the first on its lane) and one from any source,
// all with tag 5. Peer 2's send goes to the receive from any source while peer 1 has sent nothing
// yet; then peer 1's two sends land in the two receives from it, in order.
TEST(SendRecv, AReceiveFromAnySourceTakesAnotherRanksSendWhileEarlierReceivesWait) {
  Runtime rt;
  Reporter rep;
  WaitWord go1, go2;
  auto msg = [](int32_t v) { return std::vector<int32_t>{v, v}; };
  harness::run_peers(rt, harness::config_for(3), [&](Peer& peer) {
    if (peer.id() != 0) {
      WaitWord& go = peer.id() == 1 ? go1 : go2;
      if (!go.wait_at_least(1, Clock::now() + std::chrono::seconds(10))) return rep.fail("peer 0 never said go");
      for (int32_t v : peer.id() == 1 ? std::vector<int32_t>{10, 11} : std::vector<int32_t>{30})
        if (Status s = peer.send(Tensor::from(msg(v)), 0, 5); !s) rep.fail("send: " + s.to_string());
      return;
    }
    std::vector<Tensor> t;
    for (int i = 0; i < 3; ++i) t.push_back(Tensor::zeros(DType::i32, {2}));
    Work a = peer.recv_async(t[0], 1, 5);
    Work b = peer.recv_async(t[1], 1, 5);
    Work c = peer.recv_any_async(t[2], 5);
    go2.set(1);
    if (Status s = c.wait_for(std::chrono::seconds(5)); !s) rep.fail("the receive from any source: " + s.to_string());
    else if (c.source().status().is_ok() && *c.source() != 2u) rep.fail("the receive from any source took another rank's send");
    else if (t[2].to_vector<int32_t>() != msg(30)) rep.fail("the receive from any source got the wrong data");
    go1.set(1);
    if (Status s = a.wait(); !s) rep.fail("first receive from 1: " + s.to_string());
    if (Status s = b.wait(); !s) rep.fail("second receive from 1: " + s.to_string());
    if (t[0].to_vector<int32_t>() != msg(10) || t[1].to_vector<int32_t>() != msg(11))
      rep.fail("the receives from 1 got " + std::to_string(t[0].data_as<int32_t>()[0]) + ", " +
               std::to_string(t[1].data_as<int32_t>()[0]) + ", not 10, 11");
  });
  rep.expect_clean();
}

// Point-to-point traffic does not consume collective sequence numbers: collectives interleaved
// with sends on some peers only still match up.
TEST(SendRecv, InterleavedWithCollectives) {
  Runtime rt;
  Reporter rep;
  const uint32_t n = 4;
  harness::run_peers(rt, harness::config_for(n), [&](Peer& peer) {
    const uint32_t p = peer.id();
    for (int round = 0; round < 20; ++round) {
      if (round % 3 == 0 && p < 2) {  // only peers 0 and 1 talk privately
        Tensor t = Tensor::from(std::vector<int64_t>{round, static_cast<int64_t>(p)});
        if (p == 0) {
          if (Status s = peer.send(t, 1, round); !s) rep.fail("send: " + s.to_string());
        } else if (Status s = peer.recv(t, 0, round); !s) {
          rep.fail("recv: " + s.to_string());
        } else if (t.to_vector<int64_t>() != std::vector<int64_t>{round, 0}) {
          rep.fail("round " + std::to_string(round) + ": wrong private message");
        }
      }
      Tensor v = Tensor::from(std::vector<int64_t>{round * 100 + static_cast<int64_t>(p)});
      if (Status s = peer.all_reduce(v, ReduceOp::sum); !s) rep.fail("all_reduce: " + s.to_string());
      else if (v.to_vector<int64_t>()[0] != round * 100 * static_cast<int64_t>(n) + 6)
        rep.fail("round " + std::to_string(round) + ": all_reduce got " + std::to_string(v.to_vector<int64_t>()[0]));
    }
  });
  rep.expect_clean();
}

} // namespace
} // namespace chorus
