// The device actors' mailbox (cuda/task_queue.hpp) and the one polling loop of the GPU layer
// (cuda/poll.hpp), without a GPU: tasks run in order on the serving thread and hand back their
// Status; a caller's deadline is a timeout that skips a task not yet started (or leaves it queued);
// an exception is a device_error; the server sleeps and wakes without losing work, also across the
// rewinds of its word; a poll ends when done, on its stop condition, or at its deadline.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/wait.hpp"
#include "cuda/poll.hpp"
#include "cuda/task_queue.hpp"
#include "status_matchers.hpp"

namespace chorus::gpu {
namespace {

using namespace std::chrono_literals;

// A queue served by its own thread until the server is destroyed.
class Server {
 public:
  explicit Server(TaskQueue& q, std::chrono::seconds idle = 30s) : q_(q) {
    thread_ = std::thread([this, idle] {
      auto run = [](const TaskQueue::Task& t) { return t(); };
      // A long wait for work: a wake-up lost by the queue would show as a caller's timeout.
      while (!stop_.load()) q_.serve_one(Clock::now() + idle, run);
    });
  }
  ~Server() {
    stop_ = true;
    q_.submit([] { return Status::ok(); });  // wakes the server
    thread_.join();
  }
  std::thread::id id() const { return thread_.get_id(); }

 private:
  TaskQueue& q_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(TaskQueue, TasksRunInOrderOnTheServingThreadAndHandBackTheirStatus) {
  TaskQueue q("q");
  Server server(q);
  std::vector<int> order;  // touched only on the serving thread
  std::vector<std::thread::id> threads;
  std::vector<TaskQueue::Ticket> tickets;
  for (int i = 0; i < 50; ++i)
    tickets.push_back(q.submit([i, &order, &threads]() -> Status {
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
      if (i % 7 == 3) return {Errc::invalid_argument, "task " + std::to_string(i)};
      return Status::ok();
    }));
  for (int i = 0; i < 50; ++i) {
    Status s = q.wait(tickets[i], Clock::now() + 10s, "task");
    if (i % 7 == 3)
      EXPECT_EQ(s, Status(Errc::invalid_argument, "task " + std::to_string(i)));
    else
      EXPECT_TRUE(s.is_ok()) << s.to_string();
  }
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(order[i], i);
    EXPECT_EQ(threads[i], server.id());
  }
}

TEST(TaskQueue, ALateCallerGetsATimeoutAndItsUnstartedTaskIsSkipped) {
  TaskQueue q("cuda:5");
  Server server(q);
  WaitWord started, gate;
  auto blocker = q.submit([&]() -> Status {
    started.set(1);
    return gate.wait_at_least(1, Clock::now() + 10s) ? Status::ok() : Status(Errc::internal, "gate");
  });
  std::atomic<bool> second_ran{false};
  auto second = q.submit([&] {
    second_ran = true;
    return Status::ok();
  });
  ASSERT_TRUE(started.wait_at_least(1, Clock::now() + 10s));
  // The blocker runs: a caller that gives up hears that it did not finish; the second never began.
  EXPECT_TRUE(has(q.wait(blocker, Clock::now() + 5ms, "blocker"), Errc::timeout,
                  {"blocker on cuda:5 did not finish in time"}));
  EXPECT_TRUE(has(q.wait(second, Clock::now() + 5ms, "all_reduce #4"), Errc::timeout,
                  {"all_reduce #4 on cuda:5 did not start in time (skipped)"}));
  gate.set(1);
  EXPECT_TRUE(q.wait(blocker, Clock::now() + 10s, "blocker").is_ok());
  auto third = q.submit([] { return Status(Errc::device_error, "third ran"); });
  EXPECT_EQ(q.wait(third, Clock::now() + 10s, "third"), Status(Errc::device_error, "third ran"));
  EXPECT_FALSE(second_ran.load());
}

TEST(TaskQueue, ACallerThatDoesNotAbandonLeavesItsTaskQueuedAndItRunsLater) {
  TaskQueue q("cuda:0");
  Server server(q);
  WaitWord started, gate;
  auto blocker = q.submit([&] {
    started.set(1);
    gate.wait_at_least(1, Clock::now() + 10s);
    return Status::ok();
  });
  auto setup = q.submit([] { return Status(Errc::device_error, "setup failed"); });
  ASSERT_TRUE(started.wait_at_least(1, Clock::now() + 10s));
  EXPECT_TRUE(has(q.wait(setup, Clock::now() + 5ms, "NCCL communicator setup", false), Errc::timeout,
                  {"NCCL communicator setup on cuda:0 did not finish in time"}));
  gate.set(1);
  // Every later waiter gets the task's own answer.
  EXPECT_EQ(q.wait(setup, Clock::now() + 10s, "setup"), Status(Errc::device_error, "setup failed"));
  EXPECT_EQ(q.wait(setup, Clock::now() + 10s, "setup"), Status(Errc::device_error, "setup failed"));
  EXPECT_TRUE(q.wait(blocker, Clock::now() + 10s, "blocker").is_ok());
}

TEST(TaskQueue, AnExceptionOutOfATaskIsADeviceErrorAndTheNextTaskRuns) {
  TaskQueue q("cuda:2");
  Server server(q);
  auto bad = q.submit([]() -> Status { throw std::runtime_error("no scratch memory"); });
  auto good = q.submit([] { return Status::ok(); });
  EXPECT_TRUE(has(q.wait(bad, Clock::now() + 10s, "bad"), Errc::device_error,
                  {"cuda:2: device task failed: no scratch memory"}));
  EXPECT_TRUE(q.wait(good, Clock::now() + 10s, "good").is_ok());
}

TEST(TaskQueue, AnIdleServerReturnsAtItsDeadline) {
  TaskQueue q("q");
  const auto until = Clock::now() + 20ms;
  EXPECT_FALSE(q.serve_one(until, [](const TaskQueue::Task& t) { return t(); }));
  EXPECT_GE(Clock::now(), until);
}

// Several threads submit and wait, one task at a time each, so that the server keeps running dry
// and sleeping; with a tiny rewind point its word goes back to 0 hundreds of times meanwhile. A
// lost wake-up would leave a caller waiting past its deadline (the server's own wait is 30 s). The
// rewind point is above the number of callers, so that a server waiting for a stale count after a
// rewind would not be woken by them either.
TEST(TaskQueue, NoWorkIsLostWhileTheServerSleepsAndRewindsItsWord) {
  constexpr int kThreads = 4, kEach = 500;
  TaskQueue q("q", 2 * kThreads);
  Server server(q);
  std::atomic<int> ran{0};
  std::vector<std::thread> callers;
  std::vector<Status> failure(kThreads);
  for (int t = 0; t < kThreads; ++t)
    callers.emplace_back([&, t] {
      auto task = [&] {
        ran.fetch_add(1);
        return Status::ok();
      };
      for (int i = 0; i < kEach && failure[t].is_ok(); ++i) failure[t] = q.wait(q.submit(task), Clock::now() + 10s, "task");
    });
  for (auto& c : callers) c.join();
  for (auto& f : failure) EXPECT_TRUE(f.is_ok()) << f.to_string();
  EXPECT_EQ(ran.load(), kThreads * kEach);
}

constexpr PollPace kPace{std::chrono::microseconds(0), std::chrono::microseconds(10)};

TEST(PollUntil, OkOnceDoneLookingBetweenNaps) {
  int looks = 0, stops = 0;
  Status s = poll_until([&] { return ++looks == 5; }, [&] { return ++stops, Status::ok(); }, Clock::now() + 10s, kPace,
                        "late");
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(looks, 5);
  EXPECT_EQ(stops, 4);  // between the looks, not after the last
}

TEST(PollUntil, TheStopConditionsErrorEndsTheWait) {
  int looks = 0, stops = 0;
  Status s = poll_until([&] { return ++looks, false; },
                        [&] { return ++stops == 3 ? Status(Errc::device_error, "NCCL: remote error") : Status::ok(); },
                        Clock::now() + 10s, kPace, "late");
  EXPECT_EQ(s, Status(Errc::device_error, "NCCL: remote error"));
  EXPECT_EQ(looks, 3);
}

TEST(PollUntil, ATimeoutAtTheDeadlineWithTheCallersWords) {
  const auto deadline = Clock::now() + 5ms;
  int looks = 0;
  Status s = poll_until([&] { return ++looks, false; }, [] { return Status::ok(); }, deadline,
                        PollPace{std::chrono::microseconds(200), std::chrono::microseconds(50)},
                        "the GPU work did not finish in time");
  EXPECT_EQ(s, Status(Errc::timeout, "the GPU work did not finish in time"));
  EXPECT_GE(Clock::now(), deadline);
  EXPECT_GT(looks, 1);
}

} // namespace
} // namespace chorus::gpu
