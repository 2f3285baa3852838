// Barriers: the smallest one, and nobody leaves before everyone arrived (collective_cases.hpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "collective_cases.hpp"
#include "peer_harness.hpp"

namespace chorus {
namespace {

using namespace testing;

// ---- barrier ---------------------------------------------------------------------------------

// The smallest barrier: two peers, default strategy. Regression test: every barrier with n >= 2
// used to fail with Errc::internal "schedule region [0, 0) crosses or leaves the work buffer's
// parts" (WorkBuffer::bind gives a barrier no parts, and read_ptr(0, 0) for its zero-element
// sends threw in part_for); fixed in 70cbed3 (read_ptr returns nullptr for cnt == 0).
TEST(Barrier, TwoPeersSucceed) {
  Runtime rt;
  Reporter rep;
  harness::run_peers(rt, harness::config_for(2), [&](Peer& peer) {
    Status s = peer.barrier();
    if (!s) rep.fail("peer " + std::to_string(peer.id()) + ": barrier returned " + s.to_string());
  });
  rep.expect_clean();
}

TEST(Barrier, NobodyLeavesBeforeEveryoneArrives) {
  Runtime rt;
  Reporter rep;
  for (const char* strategy : kStrategies)
    for (uint32_t n : {2u, 3u, 5u, 8u}) {
      std::vector<Case> cases(12, Case{K::barrier});
      number(cases, n);  // the late peer (root) changes from barrier to barrier
      run_cases(rt, n, strategy, cases, rep);
    }
  rep.expect_clean();
}

} // namespace
} // namespace chorus
