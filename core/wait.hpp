// Waiting between peer threads without the actor scheduler: a short spin (the other side is usually
// a few hundred nanoseconds away), then a futex sleep in slices until the deadline. Every wait has
// a deadline; a wake costs a syscall only when somebody sleeps.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>

namespace chorus {

using Clock = std::chrono::steady_clock;

// The machine's hardware threads (read once: the library call reads /sys every time).
unsigned hardware_threads();
// How long waits spin before sleeping; tuned by the benchmark (CHORUS_SPIN_US overrides).
std::chrono::nanoseconds spin_budget();
// How long a wait gives the core away (sched_yield) between looks before it sleeps, where threads
// outnumber cores (CHORUS_YIELD_US overrides).
std::chrono::nanoseconds yield_budget();
// How long a thread waiting for bytes from a socket asks epoll again without sleeping (where
// threads do not outnumber cores): a sleeping core's wake-up costs more than the small op it
// waits for, so MPI-style polling pays (CHORUS_SOCKET_SPIN_US overrides; 0: sockets are never
// polled, neither by spinning nor, where threads outnumber cores, by yielding between looks).
std::chrono::nanoseconds socket_spin_budget();
// The spin worth doing when `threads` threads take part: none when they outnumber the cores,
// since a spinning thread would then keep the one it waits for off the CPU.
std::chrono::nanoseconds spin_budget_for(unsigned threads);

// How a wait passes the time before it sleeps: spinning on the word, or (threads outnumbering
// cores) giving the core away between looks, which lets the thread it waits for run at the cost
// of a system call rather than of a sleep and a wake-up.
struct Patience {
  std::chrono::nanoseconds spin{0};
  std::chrono::nanoseconds yield{0};
};
Patience patience_for(unsigned threads);

// Signals an eventfd (adds 1): wakes whoever polls it.
void signal_eventfd(int fd);
// True on the thread that leads a Poller: the only word with a watcher is its own, and it looks
// at it after every pump, so it need not signal itself.
extern thread_local constinit bool tl_leads_poller;  // constinit: no TLS wrapper call (and none for UBSan to trip on)

// A WaitWord raised to its top wakes every waiter for good (what it counted is over: an op
// stopped, a connection gone); a word that counts progress stops rising there.
inline constexpr uint32_t kWordTop = std::numeric_limits<uint32_t>::max();

struct alignas(64) WaitWord {
  std::atomic<uint32_t> value{0};
  std::atomic<uint32_t> sleepers{0};
  // An eventfd to signal when the value rises: a thread waiting for this word while it polls the
  // network (transport/poller.hpp) sleeps in epoll, not on the futex.
  std::atomic<int> watcher{-1};

  // Raises the value to v (never lowers it: states only move forward) and wakes sleepers.
  void set(uint32_t v) {
    uint32_t cur = value.load(std::memory_order_relaxed);
    while (cur < v && !value.compare_exchange_weak(cur, v, std::memory_order_seq_cst)) {
    }
    if (sleepers.load(std::memory_order_seq_cst) != 0) wake();
    if (int fd = watcher.load(std::memory_order_seq_cst); fd >= 0 && !tl_leads_poller) signal_eventfd(fd);
  }
  // Moves the value on by one and wakes sleepers, as set does, but wrapping from kWordTop - 1 to 0
  // (kWordTop stays: it is for good): for a word that counts events for as long as a process
  // lives, whose waiters wait for a change (Poller::wait_change), not for a value.
  void advance() {
    uint32_t cur = value.load(std::memory_order_relaxed);
    while (cur != kWordTop && !value.compare_exchange_weak(cur, cur + 1 == kWordTop ? 0 : cur + 1, std::memory_order_seq_cst)) {
    }
    if (sleepers.load(std::memory_order_seq_cst) != 0) wake();
    if (int fd = watcher.load(std::memory_order_seq_cst); fd >= 0 && !tl_leads_poller) signal_eventfd(fd);
  }
  // Waits until value >= target, spinning up to `spin` before sleeping; false on deadline.
  bool wait_at_least(uint32_t target, Clock::time_point deadline, std::chrono::nanoseconds spin);
  bool wait_at_least(uint32_t target, Clock::time_point deadline, Patience p);
  bool wait_at_least(uint32_t target, Clock::time_point deadline) {
    return wait_at_least(target, deadline, spin_budget());
  }
  // Sleeps once: until the value is no longer `seen`, a nudge, or `until`.
  void sleep(uint32_t seen, Clock::time_point until);
  // Wakes the sleepers without changing the value (they look again at what they wait for).
  void nudge() { wake(); }

 private:
  void wake();
};

} // namespace chorus
