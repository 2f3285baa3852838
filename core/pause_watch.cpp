#include "core/pause_watch.hpp"

#include <cstdio>

#include "core/wall_time.hpp"

namespace chorus {

namespace {
int64_t ns_of(PauseWatch::Clock::time_point t) { return t.time_since_epoch().count(); }
PauseWatch::Clock::time_point at(int64_t ns) { return PauseWatch::Clock::time_point(PauseWatch::Clock::duration(ns)); }
} // namespace

void PauseWatch::start() {
  std::lock_guard<std::mutex> lk(mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  last_wake_.store(ns_of(Clock::now()));
  thread_ = std::thread([this] { run(); });
}

std::shared_ptr<PauseWatch> PauseWatch::shared() {
  static std::mutex mu;
  static std::weak_ptr<PauseWatch> current;
  std::lock_guard<std::mutex> lk(mu);  // only the start (a thread's creation) runs under it
  if (auto w = current.lock()) return w;
  auto w = std::make_shared<PauseWatch>();
  w->start();
  current = w;
  return w;
}

void PauseWatch::stop() {
  std::thread t;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
    t.swap(thread_);
  }
  cv_.notify_all();
  if (t.joinable()) t.join();
}

void PauseWatch::run() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stopping_) {
    cv_.wait_for(lk, kTick);
    const int64_t now = ns_of(Clock::now()), last = last_wake_.load();
    // A wake far later than asked: the process stood still in between. The latest such one is kept.
    if (now - last > 4 * std::chrono::duration_cast<std::chrono::nanoseconds>(kTick).count()) {
      pause_from_.store(last);
      pause_to_.store(now);
    }
    last_wake_.store(now);
  }
}

std::optional<PauseWatch::Pause> PauseWatch::recent(Clock::duration at_least, Clock::duration within) const {
  const int64_t last = last_wake_.load();
  if (last == 0) return std::nullopt;
  const auto now = Clock::now();
  if (now - at(last) >= at_least) return Pause{at(last), now - at(last)};
  const int64_t from = pause_from_.load(), to = pause_to_.load();
  if (to != 0 && at(to) - at(from) >= at_least && now - at(to) <= within) return Pause{at(from), at(to) - at(from)};
  return std::nullopt;
}

std::string pause_words(const PauseWatch::Pause& p) {
  char length[32];
  std::snprintf(length, sizeof length, "%.1f", std::chrono::duration<double>(p.length).count());
  return "this node stood still for " + std::string(length) + " s (stopped or starved, from " + utc_time_of(p.from) + ")";
}

} // namespace chorus
