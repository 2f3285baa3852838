#include "actors/orchestrator/last_heard.hpp"

#include <algorithm>
#include <cstdio>

#include "core/wall_time.hpp"

namespace chorus {

namespace {
LastHeard::Clock::time_point at(int64_t ns) { return LastHeard::Clock::time_point(LastHeard::Clock::duration(ns)); }
// A node's heartbeat comes every 100 ms (actors/remoting.hpp): a connection closed by the other
// side or broken after less silence than this was not dropped for silence.
constexpr std::chrono::milliseconds kSilent{300};
} // namespace

std::shared_ptr<LastHeard::Entry> LastHeard::enter(const std::string& node) {
  auto e = std::make_shared<Entry>();
  e->heard_now();
  const int64_t now = e->heard.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lk(mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    const int64_t end = it->second->ended.load(std::memory_order_relaxed);
    if (end != 0 && now - end > std::chrono::nanoseconds(kKeepEnded).count()) it = entries_.erase(it);
    else ++it;
  }
  entries_.emplace(node, e);
  return e;
}

std::optional<LastHeard::Seen> LastHeard::of(const std::string& node) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto [from, to] = entries_.equal_range(node);
  if (from == to) return std::nullopt;
  int64_t heard = 0, ended = 0, ended_by_node = 0;
  bool open = false;
  for (auto it = from; it != to; ++it) {
    const Entry& e = *it->second;
    heard = std::max(heard, e.heard.load(std::memory_order_relaxed));
    const int64_t end = e.ended.load(std::memory_order_acquire);
    open = open || end == 0;
    ended = std::max(ended, end);
    if (end != 0 && e.by_node.load(std::memory_order_relaxed)) ended_by_node = std::max(ended_by_node, end);
  }
  Seen s;
  s.heard = at(heard);
  if (ended_by_node != 0) {  // its end closed one: the others follow (BASP may hear of the first)
    s.ended = at(ended_by_node);
    s.by_node = true;
  } else if (!open) {
    s.ended = at(ended);
  }
  return s;
}

LastHeard& last_heard() {
  static auto* registry = new LastHeard;  // never destroyed: a relay thread may end a pair at exit
  return *registry;
}

std::optional<std::string> loss_words(const std::optional<LastHeard::Seen>& seen, LastHeard::Clock::time_point now) {
  if (!seen) return std::nullopt;
  if (seen->ended && seen->by_node)
    return std::string("its connection to the orchestrator was closed from its end (the process exited or was killed)");
  const auto silence = (seen->ended ? *seen->ended : now) - seen->heard;
  if (silence < kSilent)
    return std::string("its connection to the orchestrator broke (reset or failed)");
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f", std::chrono::duration<double>(silence).count());
  return "silent for " + std::string(secs) + " s (nothing from it since " + utc_time_of(seen->heard) +
         "), past the heartbeat limit: stopped, starved or cut off";
}

} // namespace chorus
