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
