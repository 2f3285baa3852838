// Receive buffers for the data plane, reused across ops: a fresh multi-megabyte allocation per
// transfer costs a page fault per 4 KiB (more than the copy itself), a reused one is already mapped.
// Sizes are rounded up to powers of two; at most `keep_bytes` of idle buffers are kept.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <new>

namespace chorus {

class BufferPool {
 public:
  explicit BufferPool(std::size_t keep_bytes = std::size_t{1} << 30) : st_(std::make_shared<State>()) {
    st_->limit = keep_bytes;
  }

  // A buffer of at least `bytes` bytes (64-byte aligned); it returns to the pool when released.
  std::shared_ptr<std::byte> take(std::size_t bytes) {
    std::size_t cap = 4096;
    while (cap < bytes) cap <<= 1;
    std::byte* p = nullptr;
    {
      std::lock_guard<std::mutex> lk(st_->mu);
      auto it = st_->free.find(cap);
      if (it != st_->free.end()) {
        p = it->second;
        st_->kept -= cap;
        st_->free.erase(it);
      }
    }
    if (!p) p = static_cast<std::byte*>(std::aligned_alloc(64, cap));
    if (!p) throw std::bad_alloc();
    std::weak_ptr<State> home = st_;
    return std::shared_ptr<std::byte>(p, [home, cap](std::byte* q) {
      if (auto st = home.lock()) {
        std::lock_guard<std::mutex> lk(st->mu);
        if (st->kept + cap <= st->limit) {
          st->free.emplace(cap, q);
          st->kept += cap;
          return;
        }
      }
      std::free(q);
    });
  }

 private:
  struct State {
    std::mutex mu;
    std::multimap<std::size_t, std::byte*> free;
    std::size_t kept = 0, limit = 0;
    ~State() {
      for (auto& [cap, p] : free) std::free(p);
    }
  };
  std::shared_ptr<State> st_;
};

} // namespace chorus
