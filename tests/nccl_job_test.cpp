// NCCL across node processes (cuda/nccl_job.hpp) against the test double of tests/fake_nccl.hpp:
// 3 nodes x 2 GPUs in one test process, each node with its own device actors and its own NcclJob,
// the unique id carried by an in-memory channel. Checked: the bootstrap (one id, made at rank 0's
// node; every rank initialized with its global rank), every op's calls and results, the cache per
// (group, GPU set), the agreement on which communicator an op uses, and the abort path (a lost
// node, a deadline) with the fresh communicator of the next op.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <thread>

#include "cuda/nccl_job.hpp"
#include "fake_nccl.hpp"

namespace chorus::gpu {
namespace {

using namespace std::chrono_literals;

// The control plane's part, in memory.
class MemoryIds final : public NcclIdChannel {
 public:
  Status publish(const NcclKey& key, uint64_t generation, const NcclId& id) override {
    std::lock_guard<std::mutex> lk(mu_);
    ids_[{key, generation}] = id;
    ++published_;
    cv_.notify_all();
    return Status::ok();
  }
  Status await(const NcclKey& key, uint64_t generation, Clock::time_point deadline, NcclId& id) override {
    std::unique_lock<std::mutex> lk(mu_);
    if (!cv_.wait_until(lk, deadline, [&] { return ids_.count({key, generation}) > 0; }))
      return {Errc::timeout, "no id published in time"};
    id = ids_[{key, generation}];
    return Status::ok();
  }
  int published() {
    std::lock_guard<std::mutex> lk(mu_);
    return published_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<NcclKey, uint64_t>, NcclId> ids_;
  int published_ = 0;
};

constexpr int kNodes = 3, kGpus = 2, kRanks = kNodes * kGpus;

class NcclJobTest : public ::testing::Test {
 protected:
  NcclJobTest() {
    for (uint32_t n = 0; n < kNodes; ++n) {
      fakes_.push_back(std::make_unique<fake::FakeNccl>(fabric_, n, kGpus));
      jobs_.push_back(std::make_unique<NcclJob>(n, *fakes_.back()));
    }
  }
  ~NcclJobTest() override {
    jobs_.clear();  // aborts on the device actors, which the fakes then stop
    fakes_.clear();
    EXPECT_EQ(fabric_.count({"VIOLATION"}), 0u);
  }

  static NcclKey whole_job() {
    NcclKey k;
    for (uint32_t n = 0; n < kNodes; ++n)
      for (int d = 0; d < kGpus; ++d) k.gpus.push_back({n, d});
    return k;
  }

  // Every node of `nodes` announces, they agree, and each runs its ranks of the op (made by
  // `part(rank)`) on a thread of its own, as node processes would. The statuses by node.
  std::map<uint32_t, Status> run(const NcclKey& key, const std::function<NcclRankOp(int)>& part,
                                 std::vector<uint32_t> nodes = {0, 1, 2}, Clock::duration timeout = 10s,
                                 const std::function<void()>& meanwhile = {}) {
    std::vector<NcclAnnounce> said;
    for (uint32_t n : nodes) said.push_back(jobs_[n]->announce(key));
    const uint64_t generation = NcclJob::agree(said);
    const auto deadline = Clock::now() + timeout;
    std::map<uint32_t, Status> out;
    for (uint32_t n : nodes) out[n] = Status::ok();
    std::vector<std::thread> threads;
    for (uint32_t n : nodes)
      threads.emplace_back([&, n] {
        std::vector<NcclRankOp> mine;
        for (int r = 0; r < static_cast<int>(key.gpus.size()); ++r)
          if (key.gpus[r].node == n) mine.push_back(part(r));
        out[n] = jobs_[n]->run(key, generation, mine, deadline, ids_);
      });
    if (meanwhile) meanwhile();
    for (auto& t : threads) t.join();
    return out;
  }

  fake::FakeFabric fabric_;
  MemoryIds ids_;
  std::vector<std::unique_ptr<fake::FakeNccl>> fakes_;
  std::vector<std::unique_ptr<NcclJob>> jobs_;
};

// Per-rank buffers of floats: rank r's input element i is 100 r + i.
struct Buffers {
  Buffers(int ranks, std::size_t in_count, std::size_t out_count) : in(ranks), out(ranks) {
    for (int r = 0; r < ranks; ++r) {
      for (std::size_t i = 0; i < in_count; ++i) in[r].push_back(static_cast<float>(100 * r + i));
      out[r].assign(out_count, -1.0f);
    }
  }
  std::vector<std::vector<float>> in, out;
};

NcclRankOp part_of(OpKind kind, Buffers& b, int r, std::size_t count, int root = 0, ReduceOp op = ReduceOp::sum) {
  NcclRankOp p;
  p.kind = kind;
  p.dtype = DType::f32;
  p.redop = op;
  p.root = root;
  p.count = count;
  p.nranks = static_cast<int>(b.in.size());
  p.rank = r;
  p.in = b.in[r].data();
  p.out = b.out[r].data();
  return p;
}

void expect_all_ok(const std::map<uint32_t, Status>& statuses) {
  for (const auto& [node, s] : statuses) EXPECT_TRUE(s.is_ok()) << "node " << node << ": " << s.message();
}

TEST_F(NcclJobTest, OneIdMadeAtRankZerosNodeAndEveryRankInitializedWithItsGlobalRank) {
  const NcclKey key = whole_job();
  Buffers b(kRanks, 4, 4);
  expect_all_ok(run(key, [&](int r) { return part_of(OpKind::all_reduce, b, r, 4); }));
  for (int r = 0; r < kRanks; ++r)
    for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(b.out[r][i], 100.0f * (0 + 1 + 2 + 3 + 4 + 5) + 6.0f * i) << r;
  EXPECT_EQ(fabric_.count({"ncclGetUniqueId"}), 1u);
  EXPECT_EQ(fabric_.count({"node 0 ncclGetUniqueId #1"}), 1u);
  EXPECT_EQ(ids_.published(), 1);
  for (int r = 0; r < kRanks; ++r) {
    const std::string where = "node " + std::to_string(r / kGpus) + " cuda:" + std::to_string(r % kGpus) + " ";
    EXPECT_EQ(fabric_.count({where + "ncclCommInitRankConfig rank " + std::to_string(r) + "/6 id #1"}), 1u) << r;
    EXPECT_EQ(fabric_.count({where + "ncclAllReduce rank " + std::to_string(r) + "/6 count 4 f32 sum"}), 1u) << r;
  }
  EXPECT_EQ(fabric_.count({"ncclCommInitRankConfig"}), 6u);
  for (auto& j : jobs_) EXPECT_EQ(j->built(), 1u);
  for (auto& j : jobs_) EXPECT_EQ(j->announce(key), (NcclAnnounce{1, 1}));
  // Before an op a node knows its own ranks' GPUs only; its communicator matches still.
  NcclKey partial = key;
  for (auto& g : partial.gpus)
    if (g.node != 1) g.device = -1;
  EXPECT_EQ(jobs_[1]->announce(partial), (NcclAnnounce{1, 1}));
  partial.gpus[2].device = 1;  // another GPU here: not this communicator
  EXPECT_EQ(jobs_[1]->announce(partial), (NcclAnnounce{0, 1}));
}

TEST_F(NcclJobTest, EveryOpIsItsNcclCallsAndGivesTheReferenceResult) {
  const NcclKey key = whole_job();
  const std::size_t c = 3;  // per-rank block
  const float n = kRanks;
  auto sum_of = [&](std::size_t i) { return 100.0f * (0 + 1 + 2 + 3 + 4 + 5) + n * static_cast<float>(i); };
  {  // reduce to rank 3
    Buffers b(kRanks, c, c);
    expect_all_ok(run(key, [&](int r) { return part_of(OpKind::reduce, b, r, c, 3); }));
    for (std::size_t i = 0; i < c; ++i) EXPECT_EQ(b.out[3][i], sum_of(i));
    EXPECT_EQ(b.out[2][0], -1.0f);  // off the root nothing is written
    EXPECT_EQ(fabric_.count({"ncclReduce", "count 3 f32 sum root 3"}), 6u);
  }
  {  // broadcast from rank 4
    Buffers b(kRanks, c, c);
    expect_all_ok(run(key, [&](int r) { return part_of(OpKind::broadcast, b, r, c, 4); }));
    for (int r = 0; r < kRanks; ++r) EXPECT_EQ(b.out[r], b.in[4]) << r;
    EXPECT_EQ(fabric_.count({"ncclBroadcast", "root 4"}), 6u);
  }
  {  // all-gather
    Buffers b(kRanks, c, c * kRanks);
    expect_all_ok(run(key, [&](int r) { return part_of(OpKind::all_gather, b, r, c); }));
    for (int r = 0; r < kRanks; ++r)
      for (int k = 0; k < kRanks; ++k)
        for (std::size_t i = 0; i < c; ++i) EXPECT_EQ(b.out[r][k * c + i], 100.0f * k + i);
    EXPECT_EQ(fabric_.count({"ncclAllGather", "count 3"}), 6u);
  }
  {  // reduce-scatter: rank r gets block r of the sum
    Buffers b(kRanks, c * kRanks, c);
    expect_all_ok(run(key, [&](int r) { return part_of(OpKind::reduce_scatter, b, r, c); }));
    for (int r = 0; r < kRanks; ++r)
      for (std::size_t i = 0; i < c; ++i) EXPECT_EQ(b.out[r][i], sum_of(r * c + i)) << r;
    EXPECT_EQ(fabric_.count({"ncclReduceScatter", "count 3 f32 sum"}), 6u);
  }
  {  // all-to-all: grouped sends and receives, a rank's own block copied
    Buffers b(kRanks, c * kRanks, c * kRanks);
    expect_all_ok(run(key, [&](int r) { return part_of(OpKind::all_to_all, b, r, c); }));
    for (int r = 0; r < kRanks; ++r)
      for (int k = 0; k < kRanks; ++k)
        for (std::size_t i = 0; i < c; ++i) EXPECT_EQ(b.out[r][k * c + i], b.in[k][r * c + i]) << r << " from " << k;
    EXPECT_EQ(fabric_.count({"ncclSend"}), 30u);
    EXPECT_EQ(fabric_.count({"ncclRecv"}), 30u);
    EXPECT_EQ(fabric_.count({"ncclGroupStart"}), 6u);
    EXPECT_EQ(fabric_.count({"ncclGroupEnd"}), 6u);
    EXPECT_EQ(fabric_.count({"cudaMemcpyAsync 12 bytes"}), 6u);
  }
  {  // gather to rank 2, scatter from rank 5
    fabric_.clear_log();
    Buffers g(kRanks, c, c * kRanks);
    expect_all_ok(run(key, [&](int r) { return part_of(OpKind::gather, g, r, c, 2); }));
    for (int k = 0; k < kRanks; ++k)
      for (std::size_t i = 0; i < c; ++i) EXPECT_EQ(g.out[2][k * c + i], g.in[k][i]);
    Buffers s(kRanks, c * kRanks, c);
    expect_all_ok(run(key, [&](int r) { return part_of(OpKind::scatter, s, r, c, 5); }));
    for (int r = 0; r < kRanks; ++r)
      for (std::size_t i = 0; i < c; ++i) EXPECT_EQ(s.out[r][i], s.in[5][r * c + i]);
    EXPECT_EQ(fabric_.count({"ncclSend rank 1 -> 2 count 3"}), 1u);
    EXPECT_EQ(fabric_.count({"ncclRecv rank 2 <- 1 count 3"}), 1u);
    EXPECT_EQ(fabric_.count({"ncclSend rank 5 -> 0 count 3"}), 1u);
  }
  {  // avg: ncclAvg for floats
    Buffers b(kRanks, c, c);
    expect_all_ok(run(key, [&](int r) { return part_of(OpKind::all_reduce, b, r, c, 0, ReduceOp::avg); }));
    for (std::size_t i = 0; i < c; ++i) EXPECT_FLOAT_EQ(b.out[0][i], sum_of(i) / n);
    EXPECT_EQ(fabric_.count({"ncclAllReduce", "f32 avg"}), 6u);
  }
  {  // avg of integers: NCCL sums, chorus divides (truncating)
    std::vector<std::vector<int32_t>> in(kRanks), out(kRanks, std::vector<int32_t>(c, -1));
    for (int r = 0; r < kRanks; ++r)
      for (std::size_t i = 0; i < c; ++i) in[r].push_back(static_cast<int32_t>(r + i));
    expect_all_ok(run(key, [&](int r) {
      NcclRankOp p;
      p.kind = OpKind::all_reduce, p.dtype = DType::i32, p.redop = ReduceOp::avg, p.count = c, p.nranks = kRanks;
      p.rank = r, p.in = in[r].data(), p.out = out[r].data();
      return p;
    }));
    for (int r = 0; r < kRanks; ++r)
      for (std::size_t i = 0; i < c; ++i) EXPECT_EQ(out[r][i], (15 + 6 * static_cast<int32_t>(i)) / 6) << r;
    EXPECT_EQ(fabric_.count({"ncclAllReduce", "i32 sum"}), 6u);
    EXPECT_EQ(fabric_.count({"divide count 3 by 6"}), 6u);
  }
  // One communicator served them all.
  for (auto& j : jobs_) EXPECT_EQ(j->built(), 1u);
  EXPECT_EQ(fabric_.count({"ncclCommInitRankConfig"}), 0u);  // since the log was cleared
  EXPECT_EQ(fabric_.count({"ncclCommAbort"}), 0u);
}

TEST_F(NcclJobTest, AGroupAndAnotherGpuSetGetTheirOwnCommunicatorAndTheCacheServesRepeats) {
  const NcclKey all = whole_job();
  NcclKey group;
  group.group = 7;
  group.gpus = {{0, 1}, {1, 0}, {1, 1}, {2, 0}};
  Buffers b(kRanks, 2, 2), g(4, 2, 2);
  for (int round = 0; round < 3; ++round) {
    expect_all_ok(run(all, [&](int r) { return part_of(OpKind::all_reduce, b, r, 2); }));
    expect_all_ok(run(group, [&](int r) { return part_of(OpKind::all_reduce, g, r, 2); }));
  }
  for (std::size_t i = 0; i < 2; ++i) EXPECT_EQ(g.out[3][i], 100.0f * (0 + 1 + 2 + 3) + 4.0f * i);
  EXPECT_EQ(fabric_.count({"ncclGetUniqueId"}), 2u);
  EXPECT_EQ(fabric_.count({"ncclCommInitRankConfig", "/6 id #1"}), 6u);
  EXPECT_EQ(fabric_.count({"ncclCommInitRankConfig", "/4 id #2"}), 4u);
  // The group's rank 0 is node 0's second GPU; its rank 3 node 2's first.
  EXPECT_EQ(fabric_.count({"node 0 cuda:1 ncclCommInitRankConfig rank 0/4"}), 1u);
  EXPECT_EQ(fabric_.count({"node 2 cuda:0 ncclCommInitRankConfig rank 3/4"}), 1u);
  EXPECT_EQ(fabric_.count({"ncclAllReduce", "/4 count 2"}), 12u);
  EXPECT_EQ(jobs_[2]->built(), 2u);
}

TEST_F(NcclJobTest, AgreementKeepsASharedLiveCommunicatorElseMakesAFreshGeneration) {
  EXPECT_EQ(NcclJob::agree({{0, 0}, {0, 0}}), 1u);
  EXPECT_EQ(NcclJob::agree({{3, 3}, {3, 3}, {3, 3}}), 3u);
  EXPECT_EQ(NcclJob::agree({{3, 3}, {0, 3}, {3, 3}}), 4u);  // one node lost it
  EXPECT_EQ(NcclJob::agree({{3, 3}, {0, 0}, {3, 3}}), 4u);  // one never had it
  EXPECT_EQ(NcclJob::agree({{2, 5}, {0, 5}, {2, 5}}), 6u);  // above every node's last
  EXPECT_EQ(NcclJob::agree({{2, 5}, {2, 5}, {2, 5}}), 2u);  // an older GPU set of the group, live everywhere
}

TEST_F(NcclJobTest, ALostNodeAbortsTheSurvivorsCommunicatorAtOnceAndTheNextOpBuildsAFreshOne) {
  const NcclKey key = whole_job();
  Buffers b(kRanks, 4, 4);
  expect_all_ok(run(key, [&](int r) { return part_of(OpKind::all_reduce, b, r, 4); }));
  fabric_.clear_log();
  // Node 2 never comes to the next op; once the survivors' ranks are inside NCCL, the job hears
  // that node 2 is lost (as the orchestrator's notice would tell it) and each survivor aborts.
  const auto started = Clock::now();
  auto st = run(key, [&](int r) { return part_of(OpKind::all_reduce, b, r, 4); }, {0, 1}, 60s, [&] {
    while (fabric_.count({"ncclAllReduce"}) < 4 && Clock::now() < started + 10s) std::this_thread::yield();
    for (uint32_t n : {0u, 1u}) jobs_[n]->node_lost(2, "node 2 lost: its process exited");
  });
  EXPECT_LT(Clock::now() - started, 10s);  // at once, not at the 60 s deadline
  for (uint32_t n : {0u, 1u}) {
    EXPECT_EQ(st[n].code(), Errc::device_error) << st[n].message();
    EXPECT_NE(st[n].message().find("node 2 lost: its process exited"), std::string::npos) << st[n].message();
  }
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(fabric_.count({"ncclCommAbort rank " + std::to_string(r) + "/6 id #1"}), 1u) << r;
  EXPECT_EQ(jobs_[0]->announce(key), (NcclAnnounce{0, 1}));
  EXPECT_EQ(jobs_[2]->announce(key), (NcclAnnounce{1, 1}));  // it never knew

  // The next op of the three: a fresh id and communicator (generation 2), node 2's old one aborted.
  fabric_.clear_log();
  Buffers c(kRanks, 4, 4);
  expect_all_ok(run(key, [&](int r) { return part_of(OpKind::all_reduce, c, r, 4); }));
  EXPECT_EQ(c.out[5][0], 1500.0f);
  EXPECT_EQ(fabric_.count({"node 0 ncclGetUniqueId #2"}), 1u);
  EXPECT_EQ(fabric_.count({"ncclCommInitRankConfig", "/6 id #2"}), 6u);
  EXPECT_EQ(fabric_.count({"node 2", "ncclCommAbort", "id #1"}), 2u);
  for (auto& j : jobs_) EXPECT_EQ(j->announce(key), (NcclAnnounce{2, 2}));
}

TEST_F(NcclJobTest, AnOpPastItsDeadlineAbortsTheCommunicatorAndSaysTimeout) {
  const NcclKey key = whole_job();
  Buffers b(kRanks, 4, 4);
  expect_all_ok(run(key, [&](int r) { return part_of(OpKind::all_reduce, b, r, 4); }));
  // Node 1 never comes and nobody says why: the deadline ends it.
  auto st = run(key, [&](int r) { return part_of(OpKind::all_reduce, b, r, 4); }, {0, 2}, 300ms);
  for (uint32_t n : {0u, 2u}) EXPECT_EQ(st[n].code(), Errc::timeout) << st[n].message();
  EXPECT_NE(st[0].message().find("rank 0 (node 0 cuda:0)"), std::string::npos) << st[0].message();
  for (int r : {0, 1, 4, 5}) EXPECT_EQ(fabric_.count({"ncclCommAbort rank " + std::to_string(r) + "/6"}), 1u) << r;
  EXPECT_EQ(jobs_[2]->announce(key), (NcclAnnounce{0, 1}));
}

TEST_F(NcclJobTest, AnIdThatNeverComesEndsTheSetupAtTheDeadlineNamingTheCommunicator) {
  const NcclKey key = whole_job();
  Buffers b(kRanks, 4, 4);
  // Node 0, which makes the id, never runs this op.
  auto st = run(key, [&](int r) { return part_of(OpKind::all_reduce, b, r, 4); }, {1, 2}, 200ms);
  for (uint32_t n : {1u, 2u}) {
    EXPECT_EQ(st[n].code(), Errc::timeout) << st[n].message();
    EXPECT_NE(st[n].message().find("the NCCL unique id of group 0 (node 0 cuda:0"), std::string::npos) << st[n].message();
  }
  EXPECT_EQ(fabric_.count({"ncclCommInitRankConfig"}), 0u);
  EXPECT_EQ(jobs_[1]->announce(key), (NcclAnnounce{0, 1}));
}

TEST_F(NcclJobTest, ARankThatIsNotThisNodesOrAnOpNcclLacksIsRefusedBeforeAnyNcclCall) {
  const NcclKey key = whole_job();
  Buffers b(kRanks, 4, 4);
  const auto deadline = Clock::now() + 1s;
  Status s = jobs_[0]->run(key, 1, {part_of(OpKind::all_reduce, b, 2, 4)}, deadline, ids_);
  EXPECT_EQ(s.code(), Errc::invalid_argument);
  EXPECT_NE(s.message().find("rank 2 (node 1 cuda:0) is not on node 0"), std::string::npos) << s.message();
  s = jobs_[0]->run(key, 1, {part_of(OpKind::all_reduce, b, 0, 4, 0, ReduceOp::max)}, deadline, ids_);
  EXPECT_EQ(s.code(), Errc::invalid_argument);  // float max: NCCL drops the NaN chorus propagates
  EXPECT_NE(s.message().find("NCCL cannot serve all_reduce of f32 with max"), std::string::npos) << s.message();
  EXPECT_TRUE(fabric_.log().empty());
}

} // namespace
} // namespace chorus::gpu
