// A reusable barrier for the peer threads: spins briefly (so peers leave it within a few hundred
// nanoseconds of each other when there is a core per peer), then sleeps on the atomic (so
// oversubscribed runs do not burn the cores the op needs).
#pragma once
#include <atomic>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace chorus::bench {

class SpinBarrier {
 public:
  // spin: how many polls before sleeping (0: sleep at once).
  SpinBarrier(uint32_t parties, uint32_t spin) : parties_(parties), spin_(spin) {}

  void arrive_and_wait() {
    const uint32_t gen = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == parties_) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
      generation_.notify_all();
      return;
    }
    for (uint32_t i = 0; i < spin_; ++i) {
      if (generation_.load(std::memory_order_acquire) != gen) return;
#if defined(__x86_64__) || defined(__i386__)
      _mm_pause();
#endif
    }
    while (generation_.load(std::memory_order_acquire) == gen) generation_.wait(gen, std::memory_order_acquire);
  }

 private:
  const uint32_t parties_;
  const uint32_t spin_;
  std::atomic<uint32_t> arrived_{0};
  std::atomic<uint32_t> generation_{0};
};

} // namespace chorus::bench
