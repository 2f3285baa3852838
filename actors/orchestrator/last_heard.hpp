// When the front door last read bytes from each node's connection, and how that connection ended:
// what the orchestrator tells the survivors of a lost node. BASP says only that the node is gone,
// the same for a process that exited and for one that went silent until the heartbeat limit; the
// door's relay sees which (its guard, basp_guard.hpp, keeps the entry of the node it pinned).
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace chorus {

class LastHeard {
 public:
  using Clock = std::chrono::steady_clock;
  // Ended entries are dropped this long after their end (a daemon serves job after job).
  static constexpr std::chrono::seconds kKeepEnded{60};

  // One connection's record; the guard updates it on its relay's thread, the orchestrator reads.
  struct Entry {
    std::atomic<int64_t> heard{0};  // steady clock, ns: the last bytes read from the node
    std::atomic<int64_t> ended{0};  // steady clock, ns; 0 while the connection is open
    std::atomic<bool> by_node{false};  // the node's end closed the connection
    void heard_now() { heard.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed); }
    // `by_node` first: whoever sees `ended` set sees it too.
    void ended_now(bool by_the_node) {
      by_node.store(by_the_node, std::memory_order_relaxed);
      ended.store(Clock::now().time_since_epoch().count(), std::memory_order_release);
    }
  };
  // A fresh entry for a connection of `node` (its id as BASP serializes it; CAF may open more
  // than one).
  std::shared_ptr<Entry> enter(const std::string& node);

  // Over the node's connections: the last bytes of any; ended by the node once its side closed
  // any of them (the others follow, and BASP may report the loss on the first); else ended once
  // all have.
  struct Seen {
    Clock::time_point heard;
    std::optional<Clock::time_point> ended;
    bool by_node = false;
  };
  std::optional<Seen> of(const std::string& node) const;

 private:
  mutable std::mutex mu_;
  std::multimap<std::string, std::shared_ptr<Entry>> entries_;
};

// The process's (one door per orchestrator; node ids are unique across them).
LastHeard& last_heard();

// Why the orchestrator lost a node, in the words every survivor reads: "silent for 4.3 s (nothing
// from it since 10:45:02.260 UTC), past the heartbeat limit: stopped, starved or cut off" or "its
// connection to the orchestrator was closed from its end (the process exited or was killed)".
// Without a record (no door between them, as under TLS): nullopt.
std::optional<std::string> loss_words(const std::optional<LastHeard::Seen>& seen,
                                      LastHeard::Clock::time_point now = LastHeard::Clock::now());

} // namespace chorus
