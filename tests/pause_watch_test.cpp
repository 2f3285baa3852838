// PauseWatch (core/pause_watch.hpp): a process that runs along shows no pause; one stopped by
// SIGSTOP for 1.2 s (a child stops it and lets it go on) shows that pause, its length and its
// start, as the node then words it.
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "core/pause_watch.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;

TEST(PauseWatch, NoPauseBeforeStartOrWhileRunningAlong) {
  PauseWatch w;
  EXPECT_FALSE(w.recent(0s, 1h)) << "a watch not started knows of nothing";
  w.start();
  EXPECT_FALSE(w.recent(1s, 1h));
  w.stop();
  w.stop();  // idempotent
}

TEST(PauseWatch, AProcessStoppedAndContinuedShowsThePause) {
  PauseWatch w;
  w.start();
  const auto before = PauseWatch::Clock::now();
  const pid_t parent = getpid();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // only async-signal-safe calls here
    kill(parent, SIGSTOP);
    const timespec pause{1, 200'000'000};
    nanosleep(&pause, nullptr);
    kill(parent, SIGCONT);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);  // returns once we were stopped and continued
  ASSERT_TRUE(WIFEXITED(status));
  auto p = w.recent(1s, 1h);
  ASSERT_TRUE(p) << "the 1.2 s stop went unnoticed";
  EXPECT_GE(p->length, 1100ms);
  EXPECT_LT(p->length, 30s);
  EXPECT_GE(p->from, before - PauseWatch::kTick * 2);
  const std::string words = pause_words(*p);
  EXPECT_EQ(words.rfind("this node stood still for ", 0), 0u) << words;
  EXPECT_NE(words.find(" s (stopped or starved, from "), std::string::npos) << words;
  EXPECT_FALSE(w.recent(1h, 1h)) << "no pause that long";
  w.stop();
}

} // namespace
} // namespace chorus
