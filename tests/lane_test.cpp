// The engine's lanes (engine/lane.hpp) on their own: hand-in order, a caller that holds the lane
// keeps what comes after it waiting, a task that enters its own lane runs at once, and a lane's
// thread starts again after it ended for lack of work; a lane whose tasks their waiters claim at
// once stops waking its thread, and still runs a task nobody claims.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/lane.hpp"
#include "engine/work_state.hpp"
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

TEST(Lane, ARunnerTakesOnlyItsOwnTaskFirstInLineOnAFreeLane) {
  Lane lane;
  int a = 0, b = 0;
  EventCount ran_a, ran_b;
  EXPECT_FALSE(lane.runner(&a)()) << "nothing is queued";
  {
    Lane::Hold hold = lane.enter();  // the lane is busy: what is handed in stays queued
    ASSERT_TRUE(hold);
    lane.submit([&] { ran_a.raise(); }, &a);
    lane.submit([&] { ran_b.raise(); }, &b);
    bool took = true;
    std::thread other([&] { took = lane.runner(&a)(); });
    other.join();
    EXPECT_FALSE(took) << "a runner took a task of a busy lane";
    EXPECT_FALSE(lane.runner(&a)()) << "the holder's own thread runs the lane's task already";
    EXPECT_FALSE(ran_a.wait_for(1, 20ms));
  }
  EXPECT_TRUE(ran_a.wait_for(1));  // the lane's thread runs both, in order
  EXPECT_TRUE(ran_b.wait_for(1));
  EXPECT_FALSE(lane.runner(&b)()) << "a task that ran is not run again";
}

TEST(Lane, AWaitRunsAnOpThatHasNotStartedOnTheWaitingThread) {
  // Work::wait() asks the op's runner first (Lane::runner, set by run_async): here a runner that
  // completes the op, so the wait returns its outcome without sleeping.
  auto ws = std::make_shared<WorkState>();
  std::thread::id ran_on;
  ws->run_here = [&, raw = ws.get()] {
    ran_on = std::this_thread::get_id();
    raw->complete(Status(Errc::shape_mismatch, "ran here"));
    return true;
  };
  Status s = WorkAccess::make(ws).wait();
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(s.code(), Errc::shape_mismatch);
  EXPECT_EQ(s.message(), "ran here");
}

TEST(Lane, ALaneWhoseWaitersClaimTheirTasksStopsWakingItsThreadYetRunsATaskNobodyClaims) {
  Lane lane;
  int keys[400];
  int claimed = 0;
  EventCount ran;
  // Each task claimed by its "waiter" right after it was handed in, as a blocking call made as an
  // op and its wait claims it. The lane's thread, woken for each, may take one first; then it runs
  // there (counted all the same).
  int i = 0;
  for (; i < 400 && lane.wakes_at_once(); ++i) {
    lane.submit([&] { ran.raise(); }, &keys[i]);
    if (lane.runner(&keys[i])()) ++claimed;
    ASSERT_TRUE(ran.wait_for(i + 1));
  }
  ASSERT_FALSE(lane.wakes_at_once()) << "still waking its thread after " << i << " tasks, " << claimed << " claimed";
  EXPECT_GE(claimed, 4);
  // A task nobody claims (its caller went on with work of its own) still runs, on the lane's
  // thread, which then wakes at once again.
  int lonely = 0;
  std::thread::id ran_on;
  EventCount ran_lonely;
  lane.submit(
      [&] {
        ran_on = std::this_thread::get_id();
        ran_lonely.raise();
      },
      &lonely);
  ASSERT_TRUE(ran_lonely.wait_for(1));
  EXPECT_NE(ran_on, std::this_thread::get_id());
  EXPECT_TRUE(lane.wakes_at_once());
}

TEST(Lane, ATaskClaimedLongAfterItCameMakesALazyLaneWakeAtOnceAgain) {
  Lane lane;
  int keys[400];
  EventCount ran;
  for (int i = 0; i < 400 && lane.wakes_at_once(); ++i) {
    lane.submit([&] { ran.raise(); }, &keys[i]);
    (void)lane.runner(&keys[i])();
    ASSERT_TRUE(ran.wait_for(i + 1));
  }
  ASSERT_FALSE(lane.wakes_at_once());
  // Handed in, then claimed 200 us later (well under the thread's millisecond, over the 50 us of
  // a quick claim): its waiter overlapped it with work of its own.
  int late = 0;
  EventCount ran_late;
  lane.submit([&] { ran_late.raise(); }, &late);
  const auto until = std::chrono::steady_clock::now() + 200us;
  while (std::chrono::steady_clock::now() < until) {
  }
  if (lane.runner(&late)()) EXPECT_TRUE(lane.wakes_at_once()) << "a late claim kept the lane lazy";
  ASSERT_TRUE(ran_late.wait_for(1));
  EXPECT_TRUE(lane.wakes_at_once());
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
