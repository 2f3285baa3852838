// The engine's lanes (engine/lane.hpp) on their own: hand-in order, a caller that holds the lane
// keeps what comes after it waiting, a task that enters its own lane runs at once, and a lane's
// thread starts again after it ended for lack of work.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/lane.hpp"
#include "test_events.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;
using testing::EventCount;

TEST(Lane, TasksRunInTheOrderTheyCame) {
  Lane lane;
  std::mutex mu;
  std::vector<int> seen;
  EventCount done;
  for (int i = 0; i < 500; ++i)
    lane.submit([&, i] {
      std::lock_guard<std::mutex> lk(mu);
      seen.push_back(i);
      done.raise();
    });
  ASSERT_TRUE(done.wait_for(500));
  std::lock_guard<std::mutex> lk(mu);
  for (int i = 0; i < 500; ++i) ASSERT_EQ(seen[i], i);
}

TEST(Lane, ACallerHoldingTheLaneKeepsLaterTasksWaiting) {
  Lane lane;
  EventCount ran;
  {
    Lane::Hold hold = lane.enter();
    ASSERT_TRUE(hold);
    EXPECT_FALSE(lane.idle());
    lane.submit([&] { ran.raise(); });
    EXPECT_FALSE(ran.wait_for(1, 50ms)) << "a task ran while a caller held the lane";
    bool entered = true;
    std::thread other([&] { entered = static_cast<bool>(lane.enter()); });
    other.join();
    EXPECT_FALSE(entered) << "another thread entered a held lane";
    EXPECT_TRUE(lane.enter()) << "the holder's own nested call must not wait for itself";
  }
  EXPECT_TRUE(ran.wait_for(1));
}

TEST(Lane, ATaskEnteringItsOwnLaneRunsAtOnce) {
  Lane lane;
  EventCount inner;
  lane.submit([&] {
    if (Lane::Hold h = lane.enter()) inner.raise();
  });
  lane.submit([] {});  // queued behind: the inner enter must not wait for it
  EXPECT_TRUE(inner.wait_for(1));
}

TEST(Lane, AThreadEndedForLackOfWorkIsStartedAgain) {
  Lane lane(5ms);
  EventCount ran;
  lane.submit([&] { ran.raise(); });
  ASSERT_TRUE(ran.wait_for(1));
  const auto until = std::chrono::steady_clock::now() + 10s;  // the task returns right after raising
  while (!lane.idle() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  ASSERT_TRUE(lane.idle());
  EventCount later;
  // Whether or not the thread has ended by now, the next task runs.
  for (int i = 0; i < 3; ++i) {
    lane.submit([&] { later.raise(); });
    ASSERT_TRUE(later.wait_for(i + 1));
  }
}

} // namespace
} // namespace chorus
