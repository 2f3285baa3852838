// GPU tensors of node processes that share one GPU (runtime/peer/gpu_arena_path.hpp), end to end
// from the public API on a machine without a GPU: three nodes (Runtimes of this process, so one
// host, joined through an orchestrator daemon) of two peers each, CUDA IPC played by the double of
// tests/fake_ipc.hpp (handles name registered buffers; the lead's plan runs on host memory), the
// GPU tensors borrowed host memory tagged with a CUDA device. Checked: every op kind runs once, by
// its lead, over every peer's buffers (the other nodes' opened through their handles, its own
// node's used as they are), with the reference result; peers on different GPUs, a malformed call
// or host tensors somewhere take the ordinary path and its errors; a failure in the lead is every
// peer's error, word for word, and the next op runs.
#include <gtest/gtest.h>

#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <chorus/runtime.hpp>
#include "actors/global_client/global_client.hpp"
#include "runtime/runtime_impl.hpp"
#include "fake_ipc.hpp"
#include "fake_nccl.hpp"
#include "node_runtimes.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;

constexpr int kNodes = testing_support::NodeRuntimes::kNodes, kPeers = testing_support::NodeRuntimes::kPeers,
              kRanks = kNodes * kPeers;

class CudaIpc : public ::testing::Test {
 protected:
  // Which GPU device index d of a node is: every one the same GPU here.
  virtual int gpu_of(int) const { return 0; }
  void SetUp() override {
    Config c;
    c.timeout = 20s;
    ASSERT_TRUE(job_.start(c));
  }
  std::vector<Status> everyone(const std::function<Status(Peer&, int rank)>& call) { return job_.everyone(call); }
  void expect_strategy(const std::string& s) {
    for (auto& p : peers_) EXPECT_EQ(p->last_strategy(), s) << "rank " << p->rank();
  }

  fake::FakeIpc ipc_{[this](int d) { return gpu_of(d); }};
  fake::IpcDoubleInPlace in_place_{&ipc_};
  fake::HostMemoryAsGpus memory_;  // staging (the ordinary path) copies "GPU memory" as the host memory it is
  testing_support::NodeRuntimes job_;  // after the doubles: its runtimes go first
  Runtime (&nodes_)[kNodes] = job_.nodes;
  std::vector<Result<Peer>>& peers_ = job_.peers;
};

// Rank r's tensor on cuda:`device`; its data is host memory.
Tensor on_gpu(std::vector<float>& v, int device = 0) {
  return Tensor::borrow(v.data(), DType::f32, {static_cast<int64_t>(v.size())}, Device::cuda(device));
}

// Each rank all-reduces four copies of its rank, in data[rank] (then 15 everywhere), on `device`
// (by rank where given).
std::function<Status(Peer&, int)> sum_of_ranks(std::vector<std::vector<float>>& data, bool gpu_per_rank = false) {
  return [&data, gpu_per_rank](Peer& p, int r) {
    data[r].assign(4, static_cast<float>(r));
    Tensor x = on_gpu(data[r], gpu_per_rank ? r : 0);
    return p.all_reduce(x, ReduceOp::sum);
  };
}

// Every rank's op ended well with the sum of ranks.
void expect_sums(const std::vector<Status>& st, const std::vector<std::vector<float>>& data) {
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(st[r].is_ok()) << "rank " << r << ": " << st[r].to_string();
    EXPECT_EQ(data[r], (std::vector<float>{15, 15, 15, 15})) << r;
  }
}

TEST_F(CudaIpc, AnAllReduceRunsOnceByTheLeadOverEveryProcesssBuffers) {
  std::vector<std::vector<float>> data(kRanks);
  for (int round = 0; round < 3; ++round) {
    auto st = everyone([&](Peer& p, int r) {
      data[r].assign(5, 0.0f);
      for (int i = 0; i < 5; ++i) data[r][i] = static_cast<float>(100 * r + i + round);
      Tensor x = on_gpu(data[r]);
      return p.all_reduce(x, ReduceOp::sum);
    });
    for (int r = 0; r < kRanks; ++r) {
      ASSERT_TRUE(st[r].is_ok()) << "rank " << r << ": " << st[r].to_string();
      for (int i = 0; i < 5; ++i) EXPECT_EQ(data[r][i], 1500.0f + kRanks * (i + round)) << r;
    }
    expect_strategy("cuda-ipc");
  }
  EXPECT_EQ(ipc_.runs(), 3);
  EXPECT_EQ(ipc_.buffers_in_last_run(), kRanks);  // in place: one buffer per peer
  // Each op: every peer exports its buffer; the lead (rank 0, node 0) opens those of the four
  // peers on nodes 1 and 2 and uses its own node's two as they are.
  EXPECT_EQ(ipc_.exports(), 3 * kRanks);
  EXPECT_EQ(ipc_.opens(), 3 * (kRanks - kPeers));
  EXPECT_EQ(ipc_.releases(), ipc_.opens());  // the lead holds what it opened only while its op runs
  EXPECT_EQ(memory_.copies(), 0u);  // nothing staged through host memory
}

TEST_F(CudaIpc, EveryOpKindGivesTheReferenceResult) {
  const int c = 2;  // per-rank block
  std::vector<std::vector<float>> in(kRanks), out(kRanks);
  auto fill = [&](int r, int in_n, int out_n) {
    in[r].assign(in_n, 0.0f);
    for (int i = 0; i < in_n; ++i) in[r][i] = static_cast<float>(10 * r + i);
    out[r].assign(out_n, -1.0f);
  };
  auto ok = [](const std::vector<Status>& st) {
    for (int r = 0; r < kRanks; ++r) EXPECT_TRUE(st[r].is_ok()) << "rank " << r << ": " << st[r].to_string();
  };
  ok(everyone([&](Peer& p, int r) {
    fill(r, c * kRanks, c * kRanks);
    Tensor x = on_gpu(in[r]), y = on_gpu(out[r]);
    return p.all_to_all(x, y);
  }));
  expect_strategy("cuda-ipc");
  for (int r = 0; r < kRanks; ++r)
    for (int k = 0; k < kRanks; ++k)
      for (int i = 0; i < c; ++i) EXPECT_EQ(out[r][k * c + i], 10.0f * k + r * c + i) << r << " from " << k;

  ok(everyone([&](Peer& p, int r) {
    fill(r, c, c);
    Tensor x = on_gpu(in[r]);
    return p.broadcast(x, 4);
  }));
  expect_strategy("cuda-ipc");
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(in[r], (std::vector<float>{40, 41})) << r;

  ok(everyone([&](Peer& p, int r) {
    fill(r, c * kRanks, c);
    Tensor x = on_gpu(in[r]), y = on_gpu(out[r]);
    return p.reduce_scatter(x, y, ReduceOp::avg);
  }));
  for (int r = 0; r < kRanks; ++r)
    for (int i = 0; i < c; ++i) EXPECT_FLOAT_EQ(out[r][i], (10.0f * 15 + kRanks * (r * c + i)) / kRanks) << r;

  ok(everyone([&](Peer& p, int r) {
    fill(r, c, c * kRanks);
    Tensor x = on_gpu(in[r]), y = on_gpu(out[r]);
    return p.all_gather(x, y);
  }));
  for (int r = 0; r < kRanks; ++r)
    for (int k = 0; k < kRanks; ++k)
      for (int i = 0; i < c; ++i) EXPECT_EQ(out[r][k * c + i], 10.0f * k + i) << r;

  ok(everyone([&](Peer& p, int r) {  // the root (rank 3, node 1) leads: node 1's buffers as they are
    fill(r, c, c);
    Tensor x = on_gpu(in[r]), y = on_gpu(out[r]);
    return p.reduce(x, y, ReduceOp::max, 3);
  }));
  EXPECT_EQ(out[3], (std::vector<float>{50, 51}));
  for (int r = 0; r < kRanks; ++r)
    if (r != 3) {
      EXPECT_EQ(out[r], (std::vector<float>{-1, -1})) << "a non-root's output is left alone: " << r;
    }

  ok(everyone([&](Peer& p, int r) {
    fill(r, c, r == 1 ? c * kRanks : 0);
    Tensor x = on_gpu(in[r]);
    Tensor y = r == 1 ? on_gpu(out[r]) : Tensor();
    return p.gather(x, y, 1);
  }));
  for (int k = 0; k < kRanks; ++k)
    for (int i = 0; i < c; ++i) EXPECT_EQ(out[1][k * c + i], 10.0f * k + i) << k;

  ok(everyone([&](Peer& p, int r) {
    fill(r, r == 5 ? c * kRanks : 0, c);
    Tensor x = r == 5 ? on_gpu(in[r]) : Tensor();
    Tensor y = on_gpu(out[r]);
    return p.scatter(x, y, 5);
  }));
  expect_strategy("cuda-ipc");
  for (int r = 0; r < kRanks; ++r)
    for (int i = 0; i < c; ++i) EXPECT_EQ(out[r][i], 50.0f + r * c + i) << r;
  EXPECT_EQ(ipc_.runs(), 7);
  EXPECT_EQ(memory_.copies(), 0u);
}

// A failure in the lead (a CUDA error there) is every peer's, word for word; the next op runs.
TEST_F(CudaIpc, TheLeadsFailureIsEveryPeersError) {
  std::vector<std::vector<float>> data(kRanks);
  ipc_.fail_runs_with({Errc::device_error, "fake: an illegal memory access was encountered"});
  auto st = everyone(sum_of_ranks(data));
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(st[r].code(), Errc::device_error) << r << ": " << st[r].to_string();
    EXPECT_EQ(st[r], st[0]) << r;
  }
  EXPECT_EQ(st[0].message(), "all_reduce #0: fake: an illegal memory access was encountered");
  EXPECT_GT(ipc_.opens(), 0);
  EXPECT_EQ(ipc_.releases(), ipc_.opens());  // a failed run lets go of its buffers too
  ipc_.fail_runs_with(Status::ok());
  expect_sums(everyone(sum_of_ranks(data)), data);
  expect_strategy("cuda-ipc");
}

// Buffers that cannot be shared (an export fails: memory CUDA IPC cannot hand out) send the op the
// ordinary way after the GPUs agreed (here staged: no node registered a GPU), under a sequence
// number every peer took alike, so the next op meets in the arena again.
TEST_F(CudaIpc, BuffersThatCannotBeSharedTakeTheOrdinaryPathAndTheNextOpMeetsAgain) {
  std::vector<std::vector<float>> data(kRanks);
  ipc_.fail_exports_with({Errc::device_error, "fake: cudaIpcGetMemHandle: invalid value"});
  expect_sums(everyone(sum_of_ranks(data)), data);
  for (auto& p : peers_) EXPECT_NE(p->last_strategy(), "cuda-ipc") << p->rank();
  EXPECT_EQ(ipc_.runs(), 0);
  ipc_.fail_exports_with(Status::ok());
  expect_sums(everyone(sum_of_ranks(data)), data);
  expect_strategy("cuda-ipc");
  EXPECT_EQ(ipc_.runs(), 1);
}

// A node is lost while the lead runs the op: the peers of the node that heard of it get the loss
// at once, naming the node, while the lead is still running; the others, whose nodes have not
// heard yet, get the lead's conclusion when it comes.
TEST_F(CudaIpc, ANodeLostWhileTheLeadRunsIsNamedAtOnceWhereItIsKnown) {
  std::vector<std::vector<float>> data(kRanks);
  std::vector<std::future<Status>> done(kRanks);
  ipc_.hold_runs();
  for (int i = 0; i < kRanks; ++i) {
    const int r = static_cast<int>(peers_[i]->rank());
    data[r].assign(4, static_cast<float>(r));
    done[r] = std::async(std::launch::async, [&, i, r] {
      Tensor x = on_gpu(data[r]);
      return peers_[i]->all_reduce(x, ReduceOp::sum);
    });
  }
  ASSERT_TRUE(ipc_.wait_until_running(20s));
  // Node ids are the orchestrator's: the Runtime of ranks 2 and 3 hears of the loss of rank 4's node.
  int hears = -1;
  uint32_t lost = 0;
  for (int i = 0; i < kRanks; ++i) {
    if (peers_[i]->rank() == 2) hears = i / kPeers;
    if (peers_[i]->rank() == 4) lost = peers_[i]->node();
  }
  ASSERT_GE(hears, 0);
  const std::string why = "node " + std::to_string(lost) + " lost: the test says so";
  RuntimeAccess::impl(nodes_[hears]).global->on_node_lost(lost, why);
  for (int r : {2, 3}) {
    ASSERT_EQ(done[r].wait_for(20s), std::future_status::ready) << r;
    const Status st = done[r].get();
    EXPECT_EQ(st.code(), Errc::node_lost) << r << ": " << st.to_string();
    EXPECT_EQ(st.message(), "all_reduce #0: " + why) << r;
  }
  ipc_.release_runs();
  for (int r : {0, 1, 4, 5}) {
    ASSERT_EQ(done[r].wait_for(20s), std::future_status::ready) << r;
    const Status st = done[r].get();
    ASSERT_TRUE(st.is_ok()) << r << ": " << st.to_string();
    EXPECT_EQ(data[r], (std::vector<float>{15, 15, 15, 15})) << r;
  }
}

// A call the arena does not take goes the ordinary way: one peer's shape differs, and every peer
// gets the ordinary path's error; one node passes host tensors, and (no node registered a GPU, so
// every node stages GPU tensors through host memory) the op runs on host memory everywhere. The
// lead runs nothing.
TEST_F(CudaIpc, WhatTheArenaDoesNotTakeGetsTheOrdinaryPathsError) {
  std::vector<std::vector<float>> data(kRanks);
  auto st = everyone([&](Peer& p, int r) {
    data[r].assign(r == 3 ? 6 : 5, 1.0f);
    Tensor x = on_gpu(data[r]);
    return p.all_reduce(x, ReduceOp::sum);
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(st[r].code(), Errc::shape_mismatch) << r << ": " << st[r].to_string();
    EXPECT_EQ(st[r], st[0]) << r;
  }
  st = everyone([&](Peer& p, int r) {
    data[r].assign(5, 1.0f);
    Tensor x = p.node() == peers_[0]->node() ? Tensor::borrow(data[r].data(), DType::f32, {5}) : on_gpu(data[r]);
    return p.all_reduce(x, ReduceOp::sum);
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(st[r].is_ok()) << r << ": " << st[r].to_string();
    EXPECT_EQ(data[r], (std::vector<float>(5, 6.0f))) << r;
    EXPECT_NE(peers_[r]->last_strategy(), "cuda-ipc") << r;
  }
  EXPECT_EQ(ipc_.runs(), 0);
}

// Each rank on a GPU of its own: not the arena's (it serves processes sharing a GPU); the op takes
// the ordinary way (no node registered a GPU here, so through host memory) with the same result.
class CudaIpcDistinctGpus : public CudaIpc {
 protected:
  int gpu_of(int d) const override { return d; }
};

TEST_F(CudaIpcDistinctGpus, PeersOnDifferentGpusTakeTheOrdinaryPath) {
  std::vector<std::vector<float>> data(kRanks);
  expect_sums(everyone(sum_of_ranks(data, true)), data);
  for (auto& p : peers_) EXPECT_NE(p->last_strategy(), "cuda-ipc") << p->rank();
  EXPECT_EQ(ipc_.runs(), 0);
  EXPECT_EQ(ipc_.exports(), 0);  // the GPUs differ: known before anyone exports a buffer
  EXPECT_GT(memory_.copies(), 0u);  // staged
}

} // namespace
} // namespace chorus
