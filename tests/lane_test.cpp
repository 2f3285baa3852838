// The engine's lanes (engine/lane.hpp) on their own: hand-in order, a caller that holds the lane
// keeps what comes after it waiting, a task that enters its own lane runs at once, and a lane's
// thread starts again after it ended for lack of work; a lane whose tasks their waiters claim at
// once stops waking its thread, still runs a task nobody claims, and wakes at once again for a
// waiter that cannot run its task; a lane that goes gives its thread to the next lane. Where a test needs the waiter to find its task still queued, it
// pauses the lane's thread (Lane::pause_thread) rather than hope to win the race.
#include <gtest/gtest.h>

#include <pthread.h>
#include <time.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/spare_threads.hpp"
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

// Hands in a task (named `key`) that runs until `gate` is raised; returns once it has started.
void submit_running_until(Lane& lane, const void* key, EventCount& gate) {
  auto started = std::make_shared<EventCount>();  // the task's: it may still be raising it on return
  lane.submit(
      [started, &gate] {
        started->raise();
        ASSERT_TRUE(gate.wait_for(1, 30s));
      },
      key);
  ASSERT_TRUE(started->wait_for(1));
}

// Whether a waiter came to drain the lane within 10 s.
bool a_waiter_drains(const Lane& lane) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (lane.waiters_to_drain() == 0 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  return lane.waiters_to_drain() > 0;
}

TEST(Lane, ARunnerRunsNothingThatIsNotQueued) {
  Lane lane;
  int a = 0;
  EventCount ran;
  EXPECT_EQ(lane.runner(&a)(), Lane::Claim::left) << "nothing is queued";
  lane.submit([&] { ran.raise(); }, &a);
  ASSERT_TRUE(ran.wait_for(1));
  EXPECT_EQ(lane.runner(&a)(), Lane::Claim::left) << "a task that ran is not run again";
}

// Ops issued in a burst and then waited one by one: the waiter of an op queued behind a busy lane
// waits for the lane to be free, then runs the tasks ahead of its own and its own, in order, on its
// thread; what follows is left to its waiters (the lane, lazy now, does not take it meanwhile).
TEST(Lane, AWaiterWhoseTaskIsQueuedBehindABusyLaneRunsItAndTheTasksAheadOfItOnceTheLaneIsFree) {
  Lane lane(std::chrono::seconds(30), std::chrono::seconds(30));  // its thread leaves a lazy lane's tasks 30 s
  int a = 0, b = 0, c = 0;
  std::mutex mu;
  std::vector<std::pair<int, std::thread::id>> ran;  // which task ran, on which thread
  auto task = [&](int which) {
    return [&, which] {
      std::lock_guard<std::mutex> lk(mu);
      ran.emplace_back(which, std::this_thread::get_id());
    };
  };
  std::thread::id waiter_id;
  bool took = false;
  std::thread waiter;
  {
    Lane::Hold hold = lane.enter();  // busy: what is handed in stays queued
    ASSERT_TRUE(hold);
    lane.submit(task(1), &a);
    lane.submit(task(2), &b);
    lane.submit(task(3), &c);
    waiter = std::thread([&] {
      waiter_id = std::this_thread::get_id();
      took = lane.runner(&b)() == Lane::Claim::ran;
    });
    EXPECT_TRUE(a_waiter_drains(lane)) << "the waiter did not wait for the held lane";
    EXPECT_EQ(lane.waiters_to_drain(), 1);
    EXPECT_FALSE(lane.wakes_at_once()) << "a lane with a waiter to drain it still wakes its thread";
  }
  waiter.join();
  EXPECT_TRUE(took);
  {
    std::lock_guard<std::mutex> lk(mu);
    ASSERT_EQ(ran.size(), 2u) << "the waiter ran more or less than the tasks up to its own";
    EXPECT_EQ(ran[0], std::make_pair(1, waiter_id));
    EXPECT_EQ(ran[1], std::make_pair(2, waiter_id));
  }
  EXPECT_EQ(lane.runner(&c)(), Lane::Claim::ran) << "the next task was not left first in line for its waiter";
  std::lock_guard<std::mutex> lk(mu);
  ASSERT_EQ(ran.size(), 3u);
  EXPECT_EQ(ran[2], std::make_pair(3, std::this_thread::get_id()));
}

// With the default ages: what a drain leaves behind runs with no waiter coming for it (the lane's
// thread takes it once the drain's grace is over).
TEST(Lane, ATaskLeftBehindADrainRunsWithoutAWaiter) {
  Lane lane;
  int a = 0, b = 0, c = 0;
  EventCount gate, ran;
  submit_running_until(lane, &a, gate);
  lane.submit([&] { ran.raise(); }, &b);
  lane.submit([&] { ran.raise(); }, &c);
  std::thread waiter([&] { (void)lane.runner(&b)(); });  // b: drained here, or by the lane's thread
  EXPECT_TRUE(a_waiter_drains(lane)) << "the waiter did not wait for the busy lane";
  EXPECT_FALSE(lane.wakes_at_once());
  gate.raise();
  waiter.join();
  EXPECT_TRUE(ran.wait_for(2, 5s)) << "the task after the drained one did not run within 5 s";
}

// The waiter of an op that runs already leaves the lane as it is when nothing is queued behind it (a
// caller that overlapped one op with its work), and turns it lazy when ops are: it will run them.
TEST(Lane, AWaiterForARunningTaskTurnsTheLaneLazyOnlyWithTasksQueuedBehindIt) {
  Lane lane(std::chrono::seconds(30), std::chrono::seconds(30));
  int a = 0, b = 0;
  EventCount gate, ran_b;
  std::thread::id b_on;
  submit_running_until(lane, &a, gate);
  EXPECT_EQ(lane.runner(&a)(), Lane::Claim::left) << "a runner took a running task";
  EXPECT_TRUE(lane.wakes_at_once()) << "a waiter for the lane's only op turned it lazy";
  lane.submit(
      [&] {
        b_on = std::this_thread::get_id();
        ran_b.raise();
      },
      &b);
  EXPECT_EQ(lane.runner(&a)(), Lane::Claim::left);
  EXPECT_FALSE(lane.wakes_at_once()) << "a waiter with an op queued behind its own left the lane eager";
  gate.raise();
  EXPECT_EQ(lane.runner(&b)(), Lane::Claim::ran) << "the waiter did not run the op after its own";
  ASSERT_TRUE(ran_b.wait_for(1));
  EXPECT_EQ(b_on, std::this_thread::get_id());
}

TEST(Lane, AWaitRunsAnOpThatHasNotStartedOnTheWaitingThread) {
  // Work::wait() asks the op's runner first (Lane::runner, set by run_async): here a runner that
  // completes the op, so the wait returns its outcome without sleeping.
  auto ws = std::make_shared<WorkState>();
  std::thread::id ran_on;
  ws->run_here = [&, raw = ws.get()] {
    ran_on = std::this_thread::get_id();
    raw->complete(Status(Errc::shape_mismatch, "ran here"));
    return Lane::Claim::ran;
  };
  Status s = WorkAccess::make(ws).wait();
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(s.code(), Errc::shape_mismatch);
  EXPECT_EQ(s.message(), "ran here");
}

// Tasks claimed by their "waiter" right after they were handed in, as a blocking call made as an op
// and its wait claims them, until the lane stops waking its thread for each. The lane's thread is
// paused meanwhile: woken for each task, it would otherwise race the waiter for it, and on a busy
// host it can win every race. A claim counts as quick only within 50 us of the hand-in, so a
// preempted waiter starts the count again; hence up to 400 tries. How many the waiter claimed.
// `settle`: before each claim, the lane's thread has seen the hand-in and gone back to sleep (so
// the claims are quick only on a lane whose `quick` is long), and it is let go without a wake-up:
// it goes on from its last look, as a thread that was never paused would.
int make_lazy(Lane& lane, bool settle = false) {
  static int keys[400];
  int claimed = 0;
  EventCount ran;
  lane.pause_thread(true);
  for (int i = 0; i < 400 && lane.wakes_at_once(); ++i) {
    const int slept = lane.thread_sleeps();
    lane.submit([&] { ran.raise(); }, &keys[i]);
    if (settle) {
      const auto until = std::chrono::steady_clock::now() + 10s;
      while (lane.thread_sleeps() == slept && std::chrono::steady_clock::now() < until) std::this_thread::yield();
      EXPECT_GT(lane.thread_sleeps(), slept) << "the lane's thread never went back to sleep";
    }
    if (lane.runner(&keys[i])() == Lane::Claim::ran) ++claimed;
    else ADD_FAILURE() << "task " << i << " was not left to its waiter by the paused lane's thread";
    EXPECT_TRUE(ran.wait_for(i + 1));
  }
  lane.pause_thread(false, !settle);
  EXPECT_FALSE(lane.wakes_at_once()) << "still waking its thread after " << claimed << " claimed tasks";
  return claimed;
}

TEST(Lane, ALaneWhoseWaitersClaimTheirTasksStopsWakingItsThreadYetRunsATaskNobodyClaims) {
  Lane lane(std::chrono::seconds(30));  // its thread would sleep 30 s if a lazy lane's looks failed
  EXPECT_GE(make_lazy(lane), 4);
  ASSERT_FALSE(lane.wakes_at_once());
  // A task nobody claims (its caller went on with work of its own) still runs, on the lane's
  // thread, about a millisecond after it came, and the lane then wakes its thread at once again.
  int lonely = 0;
  std::thread::id ran_on;
  EventCount ran_lonely;
  lane.submit(
      [&] {
        ran_on = std::this_thread::get_id();
        ran_lonely.raise();
      },
      &lonely);
  ASSERT_TRUE(ran_lonely.wait_for(1, 5s)) << "a lazy lane's unclaimed task did not run within 5 s";
  EXPECT_NE(ran_on, std::this_thread::get_id());
  EXPECT_TRUE(lane.wakes_at_once());
}

// The same, with the lane's thread asleep, as it is between tasks, when the lane turns lazy: its
// last look (a task handed in to an eager lane) set it to sleep out the lane's idle time, and a
// lazy lane's hand-in wakes no one, so turning lazy must wake it to look every millisecond instead.
// (The thread is let go without a wake-up here: make_lazy's would hide a missing one.)
TEST(Lane, ALaneTurnedLazyWhileItsThreadSleepsStillRunsATaskNobodyClaims) {
  Lane lane(std::chrono::seconds(60), std::chrono::milliseconds(0), std::chrono::seconds(60));  // without the wake, its thread would sleep 60 s
  EXPECT_GE(make_lazy(lane, true), 4);
  ASSERT_FALSE(lane.wakes_at_once());
  static int lonely = 0;
  auto ran_lonely = std::make_shared<EventCount>();  // the task's: without the wake it runs after the test
  lane.submit([ran_lonely] { ran_lonely->raise(); }, &lonely);
  ASSERT_TRUE(ran_lonely->wait_for(1, 5s)) << "a lazy lane's unclaimed task did not run within 5 s";
}

// A task that waits for a later task of its own lane (a callback of an op's Work waiting for the
// handle's next op) would wait for itself: the runner says so rather than leave it to sleep.
TEST(Lane, ARunnerCalledFromATaskOfItsOwnLaneForALaterTaskSaysItIsStuck) {
  Lane lane;
  int later = 0, done_key = 0;
  Lane::Claim claim = Lane::Claim::ran, of_done = Lane::Claim::ran;
  EventCount asked, ran_later;
  {
    Lane::Hold hold = lane.enter();  // both are queued before the first runs
    ASSERT_TRUE(hold);
    lane.submit([] {}, &done_key);
    lane.submit([&] {
      claim = lane.runner(&later)();
      of_done = lane.runner(&done_key)();
      asked.raise();
    });
    lane.submit([&] { ran_later.raise(); }, &later);
  }
  ASSERT_TRUE(asked.wait_for(1));
  EXPECT_EQ(claim, Lane::Claim::stuck);
  EXPECT_EQ(of_done, Lane::Claim::left) << "a task that ran already is not one to wait for";
  EXPECT_TRUE(ran_later.wait_for(1)) << "the later task still runs once the task returned";
}

TEST(Lane, AWaiterThatCannotRunItsTaskMakesALazyLaneWakeAtOnce) {
  Lane lane;
  EventCount ran;
  // A wait inside a task of another lane (which it holds) does not wait for this lane to be
  // free: it sleeps for its task, and the lane's thread should take it at once.
  make_lazy(lane);
  ASSERT_FALSE(lane.wakes_at_once());
  int key = 0;
  {
    Lane::Hold hold = lane.enter();  // busy: the waiter below cannot run its task
    ASSERT_TRUE(hold);
    lane.submit([&] { ran.raise(); }, &key);
    Lane outer;
    EventCount asked;
    bool took = true;
    outer.submit([&] {
      took = lane.runner(&key)() == Lane::Claim::ran;
      asked.raise();
    });
    ASSERT_TRUE(asked.wait_for(1));
    EXPECT_FALSE(took);
    EXPECT_TRUE(lane.wakes_at_once()) << "a waiter that sleeps for its task left the lane lazy";
  }
  EXPECT_TRUE(ran.wait_for(1));
  // A wait with a limit, a poll or a callback does not run the task: it hurries the lane.
  make_lazy(lane);
  ASSERT_FALSE(lane.wakes_at_once());
  int other = 0;
  {
    Lane::Hold hold = lane.enter();  // keeps the task queued while the lane is hurried
    lane.submit([&] { ran.raise(); }, &other);
    lane.hurrier(&other)();
    EXPECT_TRUE(lane.wakes_at_once());
  }
  EXPECT_TRUE(ran.wait_for(2));
}

TEST(Lane, AHeldLaneWithATaskQueuedDoesNotSpinItsThread) {
  Lane lane(5ms);  // its idle time passes while the lane is held
  EventCount ran;
  timespec t0{}, t1{};
  {
    Lane::Hold hold = lane.enter();
    lane.submit([&] { ran.raise(); });
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
    std::this_thread::sleep_for(200ms);  // the hold's length, not an ordering
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
  }
  EXPECT_TRUE(ran.wait_for(1));
  const double cpu_ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
  EXPECT_LT(cpu_ms, 100.0) << "the lane's thread spun while the lane was held";
}

TEST(Lane, ATaskClaimedLongAfterItCameMakesALazyLaneWakeAtOnceAgain) {
  Lane lane;
  make_lazy(lane);
  ASSERT_FALSE(lane.wakes_at_once());
  // Handed in, then claimed 200 us later (well under the thread's millisecond, over the 50 us of
  // a quick claim): its waiter overlapped it with work of its own.
  int late = 0;
  EventCount ran_late;
  lane.pause_thread(true);  // a preempted test would otherwise find the task taken by the thread
  lane.submit([&] { ran_late.raise(); }, &late);
  const auto until = std::chrono::steady_clock::now() + 200us;
  while (std::chrono::steady_clock::now() < until) {
  }
  EXPECT_EQ(lane.runner(&late)(), Lane::Claim::ran);
  lane.pause_thread(false);
  ASSERT_TRUE(ran_late.wait_for(1));
  EXPECT_TRUE(lane.wakes_at_once()) << "a late claim kept the lane lazy";
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

// A program that tags each message by its step makes a send/recv lane per message, dropped once
// idle: each one starting and ending a thread of its own cost about 200 us a message.
TEST(Lane, ALaneThatGoesGivesItsThreadToTheNextLane) {
  auto on_lane = [](std::thread::id& id, std::string& name) {
    auto lane = std::make_unique<Lane>();
    EventCount ran;
    lane->submit([&] {
      id = std::this_thread::get_id();
      char buf[16] = {};
      pthread_getname_np(pthread_self(), buf, sizeof buf);
      name = buf;
      ran.raise();
    });
    EXPECT_TRUE(ran.wait_for(1));
    lane.reset();  // its queue is empty: its thread ends its job and goes back to the kept ones
  };
  // The process's threads: none is started between two counts where a kept one was free.
  auto threads_now = [] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) n += e.is_directory() ? 1 : 0;
    return n;
  };
  std::thread::id first, second;
  std::string first_name, second_name;
  on_lane(first, first_name);
  ASSERT_TRUE(spare_thread_idle(first, 10s)) << "the lane's thread was not given back";
  const int before = threads_now();
  on_lane(second, second_name);
  EXPECT_LE(threads_now(), before) << "the second lane started a thread of its own";
  EXPECT_NE(second, std::this_thread::get_id());
  EXPECT_EQ(first_name, "chorus-lane");
  EXPECT_EQ(second_name, "chorus-lane");
}

} // namespace
} // namespace chorus
