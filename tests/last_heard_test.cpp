// What the orchestrator says of a lost node (actors/orchestrator/last_heard.hpp): the door's record
// of each node's connection, and the words made of it.
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>

#include "actors/orchestrator/last_heard.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;
using Clock = LastHeard::Clock;

TEST(LastHeard, KeepsEachNodesLastBytesAndHowItsConnectionEnded) {
  LastHeard lh;
  EXPECT_FALSE(lh.of("node-a"));
  auto a = lh.enter("node-a");
  const auto first = lh.of("node-a");
  ASSERT_TRUE(first);
  EXPECT_FALSE(first->ended);
  a->heard.store((Clock::now() - 5s).time_since_epoch().count());
  a->by_node = true;
  a->ended.store(Clock::now().time_since_epoch().count());
  const auto seen = lh.of("node-a");
  ASSERT_TRUE(seen && seen->ended);
  EXPECT_TRUE(seen->by_node);
  EXPECT_GE(*seen->ended - seen->heard, 5s);
  (void)lh.enter("node-b");  // another node's record is its own
  EXPECT_FALSE(lh.of("node-b")->ended);
  EXPECT_TRUE(lh.of("node-a")->ended);
}

TEST(LastHeard, ANodeOfTwoConnectionsEndsWithTheFirstItsSideClosesOrWithBoth) {
  LastHeard lh;
  auto first = lh.enter("n");
  auto second = lh.enter("n");
  first->heard.store((Clock::now() - 3s).time_since_epoch().count());
  second->heard.store((Clock::now() - 2s).time_since_epoch().count());
  first->by_node = true;
  first->ended.store(Clock::now().time_since_epoch().count());
  auto seen = lh.of("n");  // its end closed one: it has gone, though the other is not closed yet
  ASSERT_TRUE(seen && seen->ended);
  EXPECT_TRUE(seen->by_node);
  EXPECT_GE(Clock::now() - seen->heard, 2s);
  EXPECT_LT(Clock::now() - seen->heard, 3s);  // the later of the two

  auto a = lh.enter("m");  // closed from the orchestrator's side: ended once both are
  auto b = lh.enter("m");
  a->ended.store(Clock::now().time_since_epoch().count());
  EXPECT_FALSE(lh.of("m")->ended);
  b->ended.store(Clock::now().time_since_epoch().count());
  ASSERT_TRUE(lh.of("m")->ended);
  EXPECT_FALSE(lh.of("m")->by_node);
}

TEST(LastHeard, AnEndedRecordIsDroppedAfterItsTime) {
  LastHeard lh;
  auto old = lh.enter("old");
  old->ended.store((Clock::now() - LastHeard::kKeepEnded - 1s).time_since_epoch().count());
  auto open = lh.enter("open");
  open->heard.store((Clock::now() - LastHeard::kKeepEnded - 1s).time_since_epoch().count());
  (void)lh.enter("new");  // entering prunes
  EXPECT_FALSE(lh.of("old"));
  EXPECT_TRUE(lh.of("open"));  // still connected, however quiet
}

TEST(LastHeard, TheWordsTellAnExitFromASilenceAndABreak) {
  const auto now = Clock::now();
  EXPECT_FALSE(loss_words(std::nullopt, now));
  LastHeard::Seen exited{now - 50ms, now, true};
  EXPECT_EQ(loss_words(exited, now),
            "its connection to the orchestrator was closed from its end (the process exited or was killed)");
  LastHeard::Seen dropped{now - 4300ms, now, false};  // the orchestrator's side closed it
  const std::string words = *loss_words(dropped, now);
  EXPECT_TRUE(std::regex_match(words, std::regex("silent for 4\\.3 s \\(nothing from it since "
                                                 "[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3} UTC\\), past the "
                                                 "heartbeat limit: stopped, starved or cut off")))
      << words;
  LastHeard::Seen still_open{now - 2s, std::nullopt, false};  // the loss came before the close
  EXPECT_EQ(loss_words(still_open, now)->rfind("silent for 2.0 s", 0), 0u) << *loss_words(still_open, now);
  LastHeard::Seen reset{now - 80ms, now, false};
  EXPECT_EQ(loss_words(reset, now), "its connection to the orchestrator broke (reset or failed)");
}

} // namespace
} // namespace chorus
