// Notices that this process stood still (SIGSTOP, a debugger, a machine too starved to run it): a
// thread wakes every kTick and measures the time between its wakes. A node that stood still long
// enough for the orchestrator to drop it must say so when it runs again, rather than blame the
// nodes that meanwhile cut it off (their connections end, its op deadlines have passed).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace chorus {

class PauseWatch {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kTick{50};

  PauseWatch() = default;
  ~PauseWatch() { stop(); }
  PauseWatch(const PauseWatch&) = delete;
  PauseWatch& operator=(const PauseWatch&) = delete;

  void start();
  void stop();  // idempotent

  // The process's watch, started: every epoch's client holds it, so a shrink or grow starts and
  // joins no thread for it; it stops with the last holder.
  static std::shared_ptr<PauseWatch> shared();

  struct Pause {
    Clock::time_point from;
    Clock::duration length;
  };
  // A pause of at least `at_least` going on right now (the watch has not woken since: whoever asks
  // ran first after it), or one that ended at most `within` ago; else nullopt. Never set before
  // start().
  std::optional<Pause> recent(Clock::duration at_least, Clock::duration within) const;

 private:
  void run();

  std::atomic<int64_t> last_wake_{0};  // steady clock, ns; 0: not started
  std::atomic<int64_t> pause_from_{0}, pause_to_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

// "this node stood still for 5.3 s (stopped or starved, from 10:45:12.345 UTC)".
std::string pause_words(const PauseWatch::Pause& p);

} // namespace chorus
