// The simulator itself (strategies/simulate.hpp): what it runs, and every error it detects in a
// hand-written exchange.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "schedule_checks.hpp"
#include "strategies/simulate.hpp"

namespace chorus {
namespace {

using namespace testing;

Step send(int peer, std::size_t off, std::size_t count) {
  return {StepKind::send, peer, off, count};
}
Step recv(int peer, std::size_t off, std::size_t count) {
  return {StepKind::recv_copy, peer, off, count};
}
Step recv_reduce(int peer, std::size_t off, std::size_t count) {
  return {StepKind::recv_reduce, peer, off, count};
}

PeerBuffers buffers(std::size_t peers, std::size_t size) {
  PeerBuffers w(peers, std::vector<int64_t>(size));
  for (std::size_t p = 0; p < peers; ++p)
    for (std::size_t e = 0; e < size; ++e) w[p][e] = static_cast<int64_t>(10 * p + e);
  return w;
}

std::string sim_error(const std::vector<Program>& programs, std::size_t size = 4) {
  return simulate(programs, buffers(programs.size(), size)).error;
}

TEST(Simulator, RunsAValidExchange) {
  // Both peers send and receive in the same round: posting first makes this fine.
  const std::vector<Program> programs = {
      {Round{{send(1, 0, 2), recv_reduce(1, 2, 2)}}, Round{{{StepKind::copy, -1, 0, 2, 2}}}},
      {Round{{send(0, 0, 2), recv(0, 2, 2)}}},
  };
  const SimResult r = simulate(programs, buffers(2, 4));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.work[0], (std::vector<int64_t>{12, 14, 12, 14}));  // [2,4) += peer 1's [0,2), copied down
  EXPECT_EQ(r.work[1], (std::vector<int64_t>{10, 11, 0, 1}));
  EXPECT_EQ(r.messages, 2u);
  EXPECT_EQ(r.elements_sent, 4u);
  EXPECT_EQ(r.makespan, 1u);
  EXPECT_TRUE(r.heard_from[0][1] && r.heard_from[1][0]);
}

TEST(Simulator, SendSeesContentAtPostTime) {
  // Peer 0 sends [0,1) in round 0, then overwrites it in round 1; peer 1 receives only in its
  // second round, but must still see the old value.
  const std::vector<Program> programs = {
      {Round{{send(1, 0, 1)}}, Round{{{StepKind::copy, -1, 0, 1, 1}}}},
      {Round{}, Round{{recv(0, 1, 1)}}},
  };
  const SimResult r = simulate(programs, buffers(2, 2));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.work[0], (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(r.work[1], (std::vector<int64_t>{10, 0}));
}

TEST(Simulator, FifoPerOrderedPair) {
  const std::vector<Program> programs = {
      {Round{{send(1, 0, 1), send(1, 1, 1)}}},
      {Round{{recv(0, 2, 1), recv(0, 3, 1)}}},
  };
  const SimResult r = simulate(programs, buffers(2, 4));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.work[1], (std::vector<int64_t>{10, 11, 0, 1}));
}

TEST(Simulator, DetectsDeadlock) {
  // Each receives before it sends, in separate rounds.
  const std::vector<Program> programs = {
      {Round{{recv(1, 0, 1)}}, Round{{send(1, 0, 1)}}},
      {Round{{recv(0, 0, 1)}}, Round{{send(0, 0, 1)}}},
  };
  EXPECT_NE(sim_error(programs).find("deadlock"), std::string::npos) << sim_error(programs);
}

TEST(Simulator, DetectsRendezvousDeadlock) {
  // Both send in round 0 and receive in round 1: a send completes only once received, so neither
  // round 0 ends.
  const std::vector<Program> programs = {
      {Round{{send(1, 0, 1)}}, Round{{recv(1, 1, 1)}}},
      {Round{{send(0, 0, 1)}}, Round{{recv(0, 1, 1)}}},
  };
  EXPECT_NE(sim_error(programs).find("deadlock"), std::string::npos) << sim_error(programs);
}

TEST(Simulator, DetectsCountMismatch) {
  const std::vector<Program> programs = {{Round{{send(1, 0, 2)}}}, {Round{{recv(0, 0, 1)}}}};
  EXPECT_NE(sim_error(programs).find("count mismatch"), std::string::npos) << sim_error(programs);
}

TEST(Simulator, DetectsUnmatchedSendAndReceive) {
  const std::vector<Program> sends = {{Round{{send(1, 0, 1)}}}, {}};
  EXPECT_NE(sim_error(sends).find("unmatched send"), std::string::npos) << sim_error(sends);
  const std::vector<Program> recvs = {{}, {Round{{recv(0, 0, 1)}}}};
  EXPECT_NE(sim_error(recvs).find("unmatched receive"), std::string::npos) << sim_error(recvs);
}

TEST(Simulator, DetectsOutOfRangeRegions) {
  EXPECT_NE(sim_error({{Round{{send(1, 3, 2)}}}, {Round{{recv(0, 0, 2)}}}}).find("out of range"),
            std::string::npos);
  EXPECT_NE(sim_error({{Round{{{StepKind::copy, -1, 0, 2, 3}}}}}).find("out of range"),
            std::string::npos);
}

TEST(Simulator, DetectsBadPeers) {
  EXPECT_NE(sim_error({{Round{{send(2, 0, 1)}}}, {}}).find("out of range"), std::string::npos);
  EXPECT_NE(sim_error({{Round{{recv(-1, 0, 1)}}}, {}}).find("out of range"), std::string::npos);
  EXPECT_NE(sim_error({{Round{{send(0, 0, 1)}}}, {}}).find("itself"), std::string::npos);
  EXPECT_NE(sim_error({{Round{{{StepKind::copy, 1, 0, 1, 2}}}}, {}}).find("peer -1"),
            std::string::npos);
}

TEST(Simulator, DetectsWriteOverARegionSentInTheSameRound) {
  const std::vector<Program> programs = {
      {Round{{send(1, 0, 2), recv(1, 1, 2)}}},
      {Round{{send(0, 0, 2), recv(0, 2, 2)}}},
  };
  EXPECT_NE(sim_error(programs).find("same round"), std::string::npos) << sim_error(programs);
  const std::vector<Program> by_copy = {
      {Round{{send(1, 2, 2), {StepKind::copy, -1, 3, 1, 0}}}},
      {Round{{recv(0, 0, 2)}}},
  };
  EXPECT_NE(sim_error(by_copy).find("same round"), std::string::npos) << sim_error(by_copy);
}

TEST(Simulator, DetectsOverlappingCopy) {
  EXPECT_NE(sim_error({{Round{{{StepKind::copy, -1, 1, 2, 0}}}}}).find("overlap"),
            std::string::npos);
}

TEST(Simulator, OrderedCombineDependsOnOrder) {
  // Peer 2 combines 0's then 1's value; peer 3 the other way round: results differ.
  const std::vector<Program> programs = {
      {Round{{send(2, 0, 1), send(3, 0, 1)}}},
      {Round{{send(2, 0, 1), send(3, 0, 1)}}},
      {Round{{recv_reduce(0, 0, 1), recv_reduce(1, 0, 1)}}},
      {Round{{recv_reduce(1, 0, 1), recv_reduce(0, 0, 1)}}},
  };
  const PeerBuffers init = {{5}, {7}, {0}, {0}};
  const SimResult sum = simulate(programs, init);
  ASSERT_TRUE(sum.ok()) << sum.error;
  EXPECT_EQ(sum.work[2], sum.work[3]);
  const SimResult ordered = simulate(programs, init, ordered_combine());
  ASSERT_TRUE(ordered.ok()) << ordered.error;
  EXPECT_NE(ordered.work[2], ordered.work[3]);
}

TEST(Simulator, RejectsMismatchedBufferCount) {
  EXPECT_FALSE(simulate({{}, {}}, PeerBuffers(1)).ok());
}

} // namespace
} // namespace chorus
