// The child-process helpers the multi-process tests and chorus-bench's --nodes launcher share
// (tests/testkit/process.hpp): waiting for the first of several children to exit, with a deadline.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <vector>

#include "testkit/process.hpp"

namespace chorus::testkit {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// One child that runs until killed and one that exits with status 3: the second is the one that
// exits, then nothing more until the first is killed.
TEST(Children, WaitAnyReportsTheChildThatExitedAndNothingWhileTheOthersRun) {
  ChildGuard sleeper{spawn("/bin/sleep", {"600"}).pid};
  ChildGuard quick{spawn("/bin/sh", {"-c", "exit 3"}).pid};
  ASSERT_GT(sleeper.pid, 0);
  ASSERT_GT(quick.pid, 0);
  auto first = wait_any({sleeper.pid, quick.pid}, Clock::now() + 30s);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->index, 1u);
  EXPECT_TRUE(WIFEXITED(first->status) && WEXITSTATUS(first->status) == 3) << describe_status(first->status);
  quick.pid = -1;  // reaped

  EXPECT_FALSE(wait_any({sleeper.pid}, Clock::now())) << "the sleeper still runs";
  EXPECT_FALSE(wait_for(sleeper.pid, 0ms));
  kill(sleeper.pid, SIGKILL);
  auto killed = wait_any({sleeper.pid}, Clock::now() + 30s);
  ASSERT_TRUE(killed);
  EXPECT_EQ(killed->index, 0u);
  EXPECT_TRUE(WIFSIGNALED(killed->status) && WTERMSIG(killed->status) == SIGKILL) << describe_status(killed->status);
  sleeper.pid = -1;
}

// A pid that is no child of this process cannot be waited for: it says so rather than wait.
TEST(Children, WaitAnyOnANonChildSaysItCannotWait) {
  auto r = wait_any({getppid()}, Clock::now() + 30s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, -1);
}

} // namespace
} // namespace chorus::testkit
