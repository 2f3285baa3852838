// The child-process helpers the multi-process tests and chorus-bench's --nodes launcher share
// (tests/testkit/process.hpp): waiting for the first of several children to exit, with a deadline;
// a child's stdin on a pipe, whose closing is the child's end of file.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

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

// cat copies its stdin until the end of file: it runs until the parent closes the pipe, and only
// this child's pipe (a second child, started later, must not hold the first one's open).
TEST(Children, ClosingAChildsStdinPipeIsItsEndOfFile) {
  Child first = spawn("/bin/cat", {}, Output::pipe, {}, Input::pipe);
  Child second = spawn("/bin/cat", {}, Output::pipe, {}, Input::pipe);
  ChildGuard g1{first.pid}, g2{second.pid};
  ASSERT_GT(first.pid, 0);
  ASSERT_GT(second.pid, 0);
  ASSERT_GE(first.in, 0);
  ASSERT_EQ(write(first.in, "go\n", 3), 3);
  EXPECT_EQ(read_word_after(first.out, "g", 30s).word, "o");  // it runs and echoes
  EXPECT_FALSE(wait_any({first.pid, second.pid}, Clock::now())) << "both still read their stdin";
  close(first.in);
  auto done = wait_any({first.pid, second.pid}, Clock::now() + 30s);
  ASSERT_TRUE(done);
  EXPECT_EQ(done->index, 0u) << "the first cat saw its end of file";
  EXPECT_TRUE(WIFEXITED(done->status) && WEXITSTATUS(done->status) == 0) << describe_status(done->status);
  g1.pid = -1;
  EXPECT_FALSE(wait_any({second.pid}, Clock::now())) << "the second one still waits for its own";
  close(second.in);
  auto second_done = wait_any({second.pid}, Clock::now() + 30s);
  ASSERT_TRUE(second_done);
  EXPECT_TRUE(WIFEXITED(second_done->status) && WEXITSTATUS(second_done->status) == 0);
  g2.pid = -1;
  close(first.out);
  close(second.out);
}

} // namespace
} // namespace chorus::testkit
