#include "core/futex.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ctime>

namespace chorus::futex {

namespace {
int op_of(int op, Scope scope) { return scope == Scope::process ? (op | FUTEX_PRIVATE_FLAG) : op; }
} // namespace

void wait(std::atomic<uint32_t>* word, uint32_t seen, std::chrono::nanoseconds at_most, Scope scope) {
  const long long ns = at_most.count() < 0 ? 0 : at_most.count();
  const timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op_of(FUTEX_WAIT, scope), seen, &ts, nullptr, 0);
}

void wake(std::atomic<uint32_t>* word, int count, Scope scope) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op_of(FUTEX_WAKE, scope), count, nullptr, nullptr, 0);
}

} // namespace chorus::futex
