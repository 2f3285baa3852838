// GPU tensors across node processes with the nccl strategy and with auto, end to end from the
// public API, on a machine without a GPU: three nodes (Runtimes of this process, joined through an
// orchestrator daemon) of two peers each, NCCL played by the test double of tests/fake_nccl.hpp
// (six "GPUs", one per rank), the GPU tensors borrowed host memory that only NCCL's double and the
// staging copies (HostMemoryAsGpus) touch. Checked: the op goes through one NCCL communicator over
// every node's ranks (never through host memory), bootstrapped once; the announcements are judged
// before NCCL is entered, so a mismatched shape or a node whose peers pass host tensors gives every
// peer the same error and no NCCL call; auto takes NCCL where every node of the op registered a
// GPU, and stages through host memory where one did not or where NCCL cannot serve the op.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <chorus/runtime.hpp>
#include "actors/global_client/global_client.hpp"
#include "runtime/runtime_impl.hpp"
#include "cuda/nccl_calls.hpp"
#include "fake_nccl.hpp"
#include "node_runtimes.hpp"
#include "status_matchers.hpp"
#include "testkit/process.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;

constexpr int kNodes = testing_support::NodeRuntimes::kNodes, kPeers = testing_support::NodeRuntimes::kPeers,
              kRanks = kNodes * kPeers;

// The double plays NCCL for this test only.
struct DoubleInPlace {
  explicit DoubleInPlace(gpu::NcclCalls* calls) { gpu::set_nccl_calls(calls); }
  ~DoubleInPlace() { gpu::set_nccl_calls(nullptr); }
};

class NcclAcrossNodes : public ::testing::Test {
 protected:
  virtual std::chrono::milliseconds timeout() const { return 20s; }
  virtual const char* strategy() const { return "nccl"; }
  // The Runtime (index into nodes_) whose node registers without GPUs; -1: none.
  virtual int without_gpus() const { return -1; }
  void SetUp() override {
    Config c;
    c.timeout = timeout();
    c.with_global_strategy(*parse_strategy(strategy()));
    ASSERT_TRUE(job_.start(c, [this](int n) -> std::shared_ptr<void> {
      // The node counts its GPUs on this thread.
      return n == without_gpus() ? std::make_shared<fake::NoGpusOnThisThread>() : nullptr;
    }));
  }
  std::vector<Status> everyone(const std::function<Status(Peer&, int rank)>& call) { return job_.everyone(call); }

  // The GPUs every node registered, by node id, as node `from` (a Runtime index) learned them.
  std::vector<uint32_t> registered_gpus(int from = 0) {
    std::vector<uint32_t> gpus;
    for (const auto& n : RuntimeAccess::impl(nodes_[from]).global->topology().nodes) gpus.push_back(n.gpus);
    return gpus;
  }

  fake::FakeFabric fabric_;
  fake::FakeNccl nccl_{fabric_, 0, kRanks};
  DoubleInPlace in_place_{&nccl_};
  fake::HostMemoryAsGpus memory_;  // staging copies the double's "GPU memory" as host memory
  testing_support::NodeRuntimes job_;  // after the doubles: its runtimes go first
  Runtime (&nodes_)[kNodes] = job_.nodes;
  std::vector<Result<Peer>>& peers_ = job_.peers;
};

// The host path: the three node runtimes share this process, so one host, and small ops on host
// memory meet in the arena (or, a peer held up past its wait, take the host schedule).
void expect_host_path(std::vector<Result<Peer>>& peers) {
  for (auto& p : peers) EXPECT_TRUE(p->last_strategy() == "arena" || p->last_strategy().rfind("hier+", 0) == 0)
      << p->last_strategy();
}

// Rank r's "GPU" is cuda:r (the double has one per rank); its data is host memory.
Tensor on_gpu(std::vector<float>& v, int rank) {
  return Tensor::borrow(v.data(), DType::f32, {static_cast<int64_t>(v.size())}, Device::cuda(rank));
}

// Each rank all-reduces four copies of its rank, in data[rank] (then 15 everywhere).
std::function<Status(Peer&, int)> sum_of_ranks(std::vector<std::vector<float>>& data) {
  return [&data](Peer& p, int r) {
    data[r].assign(4, static_cast<float>(r));
    Tensor x = on_gpu(data[r], r);
    return p.all_reduce(x, ReduceOp::sum);
  };
}

TEST_F(NcclAcrossNodes, AnAllReduceRunsOnOneCommunicatorOverEveryNodeAndNeverThroughHostMemory) {
  std::vector<std::vector<float>> data(kRanks);
  for (int round = 0; round < 3; ++round) {
    auto st = everyone([&](Peer& p, int r) {
      data[r].assign(5, 0.0f);
      for (int i = 0; i < 5; ++i) data[r][i] = static_cast<float>(100 * r + i + round);
      Tensor x = on_gpu(data[r], r);
      return p.all_reduce(x, ReduceOp::sum);
    });
    for (int r = 0; r < kRanks; ++r) {
      ASSERT_TRUE(st[r].is_ok()) << "rank " << r << ": " << st[r].to_string();
      for (int i = 0; i < 5; ++i) EXPECT_EQ(data[r][i], 1500.0f + kRanks * (i + round)) << r;
    }
  }
  for (auto& p : peers_) EXPECT_EQ(p->last_strategy(), "nccl");
  // Ids are made by the node of rank 0 only: the one the communicator was built with, and the
  // spare it announces with every later op (in case a fresh communicator is needed), made once.
  EXPECT_EQ(fabric_.count({"ncclGetUniqueId"}), 2u);
  for (int r = 0; r < kRanks; ++r) {
    const std::string gpu = "cuda:" + std::to_string(r) + " ";
    EXPECT_EQ(fabric_.count({gpu + "ncclCommInitRankConfig rank " + std::to_string(r) + "/6 id #1"}), 1u) << r;
    EXPECT_EQ(fabric_.count({gpu + "ncclAllReduce rank " + std::to_string(r) + "/6 count 5 f32 sum"}), 3u) << r;
  }
  EXPECT_EQ(fabric_.count({"VIOLATION"}), 0u);
}

TEST_F(NcclAcrossNodes, EveryOpKindGivesTheReferenceResult) {
  const int c = 2;  // per-rank block
  std::vector<std::vector<float>> in(kRanks), out(kRanks);
  auto fill = [&](int r, int in_n, int out_n) {
    in[r].assign(in_n, 0.0f);
    for (int i = 0; i < in_n; ++i) in[r][i] = static_cast<float>(10 * r + i);
    out[r].assign(out_n, -1.0f);
  };
  auto st = everyone([&](Peer& p, int r) {
    fill(r, c * kRanks, c * kRanks);
    Tensor x = on_gpu(in[r], r), y = on_gpu(out[r], r);
    return p.all_to_all(x, y);
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(st[r].is_ok()) << st[r].to_string();
    for (int k = 0; k < kRanks; ++k)
      for (int i = 0; i < c; ++i) EXPECT_EQ(out[r][k * c + i], 10.0f * k + r * c + i) << r << " from " << k;
  }
  st = everyone([&](Peer& p, int r) {
    fill(r, c, c);
    Tensor x = on_gpu(in[r], r);
    return p.broadcast(x, 4);
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(st[r].is_ok()) << st[r].to_string();
    EXPECT_EQ(in[r], (std::vector<float>{40, 41})) << r;
  }
  st = everyone([&](Peer& p, int r) {
    fill(r, c * kRanks, c);
    Tensor x = on_gpu(in[r], r), y = on_gpu(out[r], r);
    return p.reduce_scatter(x, y, ReduceOp::avg);
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(st[r].is_ok()) << st[r].to_string();
    for (int i = 0; i < c; ++i) EXPECT_FLOAT_EQ(out[r][i], (10.0f * 15 + kRanks * (r * c + i)) / kRanks) << r;
  }
  EXPECT_EQ(fabric_.count({"ncclSend"}), 30u);
  EXPECT_EQ(fabric_.count({"ncclBroadcast", "root 4"}), 6u);
  EXPECT_EQ(fabric_.count({"ncclReduceScatter", "f32 avg"}), 6u);
  EXPECT_EQ(fabric_.count({"ncclCommInitRankConfig"}), 6u);  // one communicator for all three
}

TEST_F(NcclAcrossNodes, AMismatchIsEveryPeersErrorBeforeNcclIsEntered) {
  std::vector<std::vector<float>> data(kRanks);
  auto st = everyone([&](Peer& p, int r) {
    data[r].assign(r == 3 ? 6 : 5, 1.0f);  // rank 3 (on node 1) calls with another shape
    Tensor x = on_gpu(data[r], r);
    return p.all_reduce(x, ReduceOp::sum);
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(st[r].code(), Errc::shape_mismatch) << r << ": " << st[r].to_string();
    EXPECT_EQ(st[r], st[0]) << r;  // the same words everywhere
  }
  // A node whose peers pass host tensors, with nccl: device_mismatch everywhere.
  st = everyone([&](Peer& p, int r) {
    data[r].assign(5, 1.0f);
    Tensor x = p.node() == peers_[0]->node() ? Tensor::borrow(data[r].data(), DType::f32, {5}) : on_gpu(data[r], r);
    return p.all_reduce(x, ReduceOp::sum);
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(st[r].code(), Errc::device_mismatch) << r << ": " << st[r].to_string();
    EXPECT_NE(st[r].message().find("pass host tensors"), std::string::npos) << st[r].to_string();
  }
  EXPECT_EQ(fabric_.count({"ncclAllReduce"}), 0u);
  EXPECT_EQ(fabric_.count({"ncclCommInitRankConfig"}), 0u);
}

// Two ranks on one GPU of one host (NCCL would fail its setup): every peer gets the same error,
// naming them, before any NCCL call.
TEST_F(NcclAcrossNodes, TwoRanksOnOneGpuOfAHostAreEveryPeersErrorBeforeNccl) {
  std::vector<std::vector<float>> data(kRanks);
  auto st = everyone([&](Peer& p, int r) {
    data[r].assign(4, 1.0f);
    Tensor x = on_gpu(data[r], r == 4 ? 1 : r);  // rank 4 (node 2) takes rank 1's GPU (node 0)
    return p.all_reduce(x, ReduceOp::sum);
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(st[r].code(), Errc::invalid_argument) << r << ": " << st[r].to_string();
    EXPECT_EQ(st[r], st[0]) << r;
  }
  EXPECT_NE(st[0].message().find("all_reduce #0: ranks 1 and 4 are both on cuda:1 of one host (nodes 0 and 2)"),
            std::string::npos)
      << st[0].to_string();
  EXPECT_EQ(fabric_.count({"cuda:"}), 0u);  // no GPU saw a call (only rank 0's node made its spare id)
}

// Each rank bitwise-ors its rank into four i32 on its GPU (then 0|1|2|3|4|5 = 7 everywhere).
std::function<Status(Peer&, int)> or_of_ranks(std::vector<std::vector<int32_t>>& data) {
  return [&data](Peer& p, int r) {
    data[r].assign(4, r);
    Tensor x = Tensor::borrow(data[r].data(), DType::i32, {4}, Device::cuda(r));
    return p.all_reduce(x, ReduceOp::bor);
  };
}

// An op NCCL cannot serve (a bitwise reduction) takes the host-memory path even with the nccl
// strategy: no NCCL call; each rank's tensor is copied out and the result copied back.
TEST_F(NcclAcrossNodes, AnOpNcclCannotServeGoesThroughHostMemory) {
  std::vector<std::vector<int32_t>> data(kRanks);
  auto st = everyone(or_of_ranks(data));
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(st[r].is_ok()) << r << ": " << st[r].to_string();
    EXPECT_EQ(data[r], (std::vector<int32_t>{7, 7, 7, 7})) << r;
  }
  EXPECT_EQ(fabric_.count({"nccl"}), 0u);
  EXPECT_EQ(memory_.copies(), 2u * kRanks);
}

// A rank's GPU hangs inside NCCL: nobody names a node, so the op's deadline ends it; every rank's
// communicator is aborted on its own device actor, and the next op builds a fresh one (with the
// spare id rank 0's node announced), which every node agrees on.
class NcclAcrossNodesShortTimeout : public NcclAcrossNodes {
 protected:
  std::chrono::milliseconds timeout() const override { return 1500ms; }
};

TEST_F(NcclAcrossNodesShortTimeout, AHungRankEndsAtTheDeadlineAndTheNextOpBuildsAFreshCommunicator) {
  std::vector<std::vector<float>> data(kRanks);
  auto op = sum_of_ranks(data);
  for (auto& s : everyone(op)) ASSERT_TRUE(s.is_ok()) << s.to_string();
  nccl_.hold(5);
  const auto t0 = std::chrono::steady_clock::now();
  auto st = everyone(op);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(st[r].code(), Errc::timeout) << r << ": " << st[r].to_string();
    EXPECT_NE(st[r].message().find("all_reduce #1: rank "), std::string::npos) << st[r].to_string();
  }
  for (int r = 0; r < kRanks; ++r)
    EXPECT_EQ(fabric_.count({"cuda:" + std::to_string(r) + " ncclCommAbort rank " + std::to_string(r) + "/6 id #1"}), 1u)
        << r;
  nccl_.hold(-1);
  st = everyone(op);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(st[r].is_ok()) << r << ": " << st[r].to_string();
    EXPECT_EQ(data[r][0], 15.0f);
  }
  EXPECT_EQ(fabric_.count({"ncclCommInitRankConfig", "/6 id #2"}), 6u);  // the spare, made at op #1
}

// The job loses a node's link while every rank is inside NCCL (node 0 cuts its data connection to
// node 2 off, as it does after a stall, and the orchestrator tells node 1): every node's
// communicator is aborted at once and every peer's op fails with node_lost naming the link, not
// at the op's deadline. (A killed process is told the same way, by the orchestrator.)
TEST_F(NcclAcrossNodes, ALostLinkAbortsTheCommunicatorsAndEveryPeerHearsItAtOnce) {
  std::vector<std::vector<float>> data(kRanks);
  auto op = sum_of_ranks(data);
  for (auto& s : everyone(op)) ASSERT_TRUE(s.is_ok()) << s.to_string();
  nccl_.hold(5);  // rank 5 (node 2) never completes: the others wait inside NCCL
  std::vector<Status> st;
  std::thread ops([&] { st = everyone(op); });
  // Once every rank has entered the op's all-reduce.
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (fabric_.count({"ncclAllReduce"}) < 2 * kRanks && std::chrono::steady_clock::now() < until)
    std::this_thread::yield();
  ASSERT_EQ(fabric_.count({"ncclAllReduce"}), 2u * kRanks);
  GlobalClient* node[kNodes];
  for (auto& rt : nodes_) {
    GlobalClient* g = RuntimeAccess::impl(rt).global.get();
    node[g->node_id()] = g;
  }
  const auto cut = std::chrono::steady_clock::now();
  node[0]->cut_off(2, "cut by the test");
  ops.join();
  EXPECT_LT(std::chrono::steady_clock::now() - cut, 5s) << "the peers waited out their 20 s timeout";
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(st[r].code(), Errc::node_lost) << r << ": " << st[r].to_string();
    EXPECT_NE(st[r].message().find("all_reduce #1: "), std::string::npos) << st[r].to_string();
    EXPECT_NE(st[r].message().find("the data connection between node 0 and node 2 broke"), std::string::npos)
        << st[r].to_string();
  }
  for (int r = 0; r < kRanks; ++r)
    EXPECT_EQ(fabric_.count({"cuda:" + std::to_string(r) + " ncclCommAbort rank " + std::to_string(r) + "/6"}), 1u) << r;
}

// auto: every node registered the double's six GPUs, so GPU tensors go through NCCL as with the
// nccl strategy, and host tensors through a host schedule on the same job.
class NcclAcrossNodesAuto : public NcclAcrossNodes {
 protected:
  const char* strategy() const override { return "auto"; }
};

TEST_F(NcclAcrossNodesAuto, GpuTensorsOnEveryNodeRunOnOneNcclCommunicatorAndHostTensorsOnTheHost) {
  for (int k = 0; k < kNodes; ++k) EXPECT_EQ(registered_gpus(k), (std::vector<uint32_t>{6, 6, 6})) << k;
  std::vector<std::vector<float>> data(kRanks);
  for (int round = 0; round < 2; ++round) {
    auto st = everyone(sum_of_ranks(data));
    for (int r = 0; r < kRanks; ++r) {
      ASSERT_TRUE(st[r].is_ok()) << "rank " << r << ": " << st[r].to_string();
      EXPECT_EQ(data[r], (std::vector<float>{15, 15, 15, 15})) << r;
    }
    for (auto& p : peers_) EXPECT_EQ(p->last_strategy(), "nccl");
  }
  for (int r = 0; r < kRanks; ++r) {
    const std::string gpu = "cuda:" + std::to_string(r) + " ";
    EXPECT_EQ(fabric_.count({gpu + "ncclCommInitRankConfig rank " + std::to_string(r) + "/6 id #1"}), 1u) << r;
    EXPECT_EQ(fabric_.count({gpu + "ncclAllReduce rank " + std::to_string(r) + "/6 count 4 f32 sum"}), 2u) << r;
  }
  EXPECT_EQ(memory_.copies(), 0u);  // never through host memory
  // Host tensors on the same job: the host path, no NCCL.
  auto st = everyone([&](Peer& p, int r) {
    data[r].assign(3, static_cast<float>(r));
    Tensor x = Tensor::borrow(data[r].data(), DType::f32, {3});
    return p.all_reduce(x, ReduceOp::sum);
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(st[r].is_ok()) << "rank " << r << ": " << st[r].to_string();
    EXPECT_EQ(data[r], (std::vector<float>{15, 15, 15})) << r;
  }
  expect_host_path(peers_);
  EXPECT_EQ(fabric_.count({"ncclAllReduce"}), 2u * kRanks);
  EXPECT_EQ(memory_.copies(), 0u);
}

// A node whose peers pass host tensors meets nodes whose peers pass GPU tensors: the GPU nodes are
// on the NCCL path, the host node on a host schedule, and the announcements give every peer the
// same device_mismatch before NCCL is entered; the next op, on GPU tensors everywhere, runs.
TEST_F(NcclAcrossNodesAuto, HostTensorsMeetingGpuTensorsAreEveryPeersDeviceMismatch) {
  std::vector<std::vector<float>> data(kRanks);
  const uint32_t host_node = peers_[0]->node();
  auto st = everyone([&](Peer& p, int r) {
    data[r].assign(4, 1.0f);
    Tensor x = p.node() == host_node ? Tensor::borrow(data[r].data(), DType::f32, {4}) : on_gpu(data[r], r);
    return p.all_reduce(x, ReduceOp::sum);
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(st[r].code(), Errc::device_mismatch) << r << ": " << st[r].to_string();
    EXPECT_EQ(st[r], st[0]) << r;  // the same words everywhere
  }
  const std::string& m = st[0].message();
  EXPECT_NE(m.find("all_reduce #0: node "), std::string::npos) << m;
  EXPECT_NE(m.find("but node " + std::to_string(host_node) + "'s pass host tensors"), std::string::npos) << m;
  EXPECT_NE(m.find("auto where every node of the op has a GPU, run GPU tensors through NCCL"), std::string::npos) << m;
  EXPECT_NE(m.find("a host strategy, e.g. ring, stages an op that mixes them"), std::string::npos) << m;
  EXPECT_EQ(fabric_.count({"ncclCommInitRankConfig"}), 0u);
  EXPECT_EQ(fabric_.count({"ncclAllReduce"}), 0u);
  EXPECT_EQ(memory_.copies(), 0u);
  st = everyone(sum_of_ranks(data));
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(st[r].is_ok()) << "rank " << r << ": " << st[r].to_string();
    EXPECT_EQ(data[r], (std::vector<float>{15, 15, 15, 15})) << r;
  }
  EXPECT_EQ(fabric_.count({"ncclAllReduce"}), 1u * kRanks);
}

// Under auto too, an op NCCL cannot serve (a bitwise reduction) goes through host memory.
TEST_F(NcclAcrossNodesAuto, AnOpNcclCannotServeIsStagedThroughHostMemory) {
  std::vector<std::vector<int32_t>> data(kRanks);
  auto st = everyone(or_of_ranks(data));
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(st[r].is_ok()) << r << ": " << st[r].to_string();
    EXPECT_EQ(data[r], (std::vector<int32_t>{7, 7, 7, 7})) << r;
  }
  expect_host_path(peers_);
  EXPECT_EQ(fabric_.count({"nccl"}), 0u);
  EXPECT_EQ(memory_.copies(), 2u * kRanks);  // each rank's tensor out and the result back
}

// One node registered without GPUs (a machine without any): every node learns it from the
// topology, and auto stages every op on GPU tensors through host memory, on every node alike, so
// the GPU-less node's host tensors meet the others' GPU tensors in one host schedule.
class NcclAcrossNodesAutoOneNodeWithoutGpus : public NcclAcrossNodesAuto {
 protected:
  int without_gpus() const override { return 2; }
};

TEST_F(NcclAcrossNodesAutoOneNodeWithoutGpus, EveryOpIsStagedThroughHostMemory) {
  const uint32_t bare = peers_[2 * kPeers]->node();
  std::vector<uint32_t> expected{6, 6, 6};
  expected[bare] = 0;
  for (int k = 0; k < kNodes; ++k) EXPECT_EQ(registered_gpus(k), expected) << k;
  std::vector<std::vector<float>> data(kRanks);
  auto st = everyone([&](Peer& p, int r) {
    data[r].assign(4, static_cast<float>(r));
    Tensor x = p.node() == bare ? Tensor::borrow(data[r].data(), DType::f32, {4}) : on_gpu(data[r], r);
    return p.all_reduce(x, ReduceOp::sum);
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(st[r].is_ok()) << "rank " << r << ": " << st[r].to_string();
    EXPECT_EQ(data[r], (std::vector<float>{15, 15, 15, 15})) << r;
  }
  expect_host_path(peers_);
  EXPECT_EQ(memory_.copies(), 2u * (kRanks - kPeers));  // the GPU ranks' tensors out and back
  // The choice reads the topology, not the tensors: GPU tensors on every node stage as well.
  st = everyone(sum_of_ranks(data));
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(st[r].is_ok()) << "rank " << r << ": " << st[r].to_string();
    EXPECT_EQ(data[r], (std::vector<float>{15, 15, 15, 15})) << r;
  }
  EXPECT_EQ(memory_.copies(), 2u * (kRanks - kPeers) + 2u * kRanks);
  EXPECT_EQ(fabric_.count({"nccl"}), 0u);
}

} // namespace
} // namespace chorus
