// The one futex wrapper: sleep while a 32-bit word holds a value, wake its sleepers. Words in
// memory that only this process maps use the private form (cheaper); words in a segment that
// several processes map (the arena, the shared-memory rings) must use the shared one.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>

namespace chorus::futex {

enum class Scope : uint8_t { process, shared };

// Sleeps while *word == seen, at most `at_most` (a wake, a signal or a changed word end it early).
void wait(std::atomic<uint32_t>* word, uint32_t seen, std::chrono::nanoseconds at_most, Scope scope);
// Wakes up to `count` sleepers of *word.
void wake(std::atomic<uint32_t>* word, int count, Scope scope);
inline constexpr int kAll = 0x7fffffff;

} // namespace chorus::futex
