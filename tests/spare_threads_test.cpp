// Threads kept for reuse (core/spare_threads.hpp): a job run after another has been joined takes
// the same thread; jobs at once each get a thread; a job's join waits for its end.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/spare_threads.hpp"
#include "core/wait.hpp"

namespace chorus {
namespace {

TEST(SpareThreads, AJobAfterAnotherEndedTakesItsThread) {
  std::thread::id first, second;
  SpareJob a = run_on_spare_thread([&] { first = std::this_thread::get_id(); });
  ASSERT_TRUE(a.joinable());
  a.join();
  EXPECT_FALSE(a.joinable());
  SpareJob b = run_on_spare_thread([&] { second = std::this_thread::get_id(); });
  b.join();
  EXPECT_NE(first, std::this_thread::get_id());
  EXPECT_EQ(first, second) << "the second job started a thread of its own";
}

TEST(SpareThreads, JobsAtOnceRunSideBySide) {
  // Each waits for the other's word: on one thread they could not both end.
  WaitWord a_in, b_in;
  bool a_saw = false, b_saw = false;
  const auto limit = Clock::now() + std::chrono::seconds(10);
  SpareJob a = run_on_spare_thread([&] {
    a_in.set(1);
    a_saw = b_in.wait_at_least(1, limit);
  });
  SpareJob b = run_on_spare_thread([&] {
    b_in.set(1);
    b_saw = a_in.wait_at_least(1, limit);
  });
  a.join();
  b.join();
  EXPECT_TRUE(a_saw);
  EXPECT_TRUE(b_saw);
}

TEST(SpareThreads, JoinWaitsForTheJobsEnd) {
  WaitWord go;
  std::atomic<int> step{0};
  SpareJob j = run_on_spare_thread([&] {
    go.wait_at_least(1, Clock::now() + std::chrono::seconds(10));
    step = 2;
  });
  step = 1;
  go.set(1);
  j.join();
  EXPECT_EQ(step.load(), 2);
}

} // namespace
} // namespace chorus
