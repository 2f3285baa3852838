// Buffers reused across ops: a fresh multi-megabyte allocation per transfer costs a page fault per
// 4 KiB (more than the copy itself), and page-locked memory for GPU staging far more. Sizes are
// rounded up to powers of two; at most `keep_bytes` of idle buffers are kept. The memory comes
// from `allocate` / `release` (64-byte aligned host memory by default; pinned memory for staging).
#pragma once
#include <cstddef>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <utility>

namespace chorus {

class BufferPool {
 public:
  using Allocate = void* (*)(std::size_t bytes);  // nullptr when the memory cannot be had
  using Release = void (*)(void* p);

  explicit BufferPool(std::size_t keep_bytes = std::size_t{1} << 30, Allocate allocate = aligned,
                      Release release = freed)
      : st_(std::make_shared<State>()) {
    st_->limit = keep_bytes;
    st_->release = release;
    allocate_ = allocate;
  }

  // Releases every idle buffer now (the GPU layer's teardown: pinned and device memory must go
  // before CUDA unloads) and returns their bytes; buffers in use still come back to the pool later.
  std::size_t release_idle() {
    std::multimap<std::size_t, std::byte*> idle;
    std::size_t bytes = 0;
    {
      std::lock_guard<std::mutex> lk(st_->mu);
      idle.swap(st_->free);
      bytes = std::exchange(st_->kept, 0);
    }
    for (auto& [cap, p] : idle) st_->release(p);
    return bytes;
  }
  std::size_t idle_bytes() const {
    std::lock_guard<std::mutex> lk(st_->mu);
    return st_->kept;
  }

  // A buffer of at least `bytes` bytes; it returns to the pool when released. Throws
  // std::bad_alloc when the allocator has none.
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
    if (!p) p = static_cast<std::byte*>(allocate_(cap));
    if (!p) throw std::bad_alloc();
    std::weak_ptr<State> home = st_;
    const Release release = st_->release;
    return std::shared_ptr<std::byte>(p, [home, cap, release](std::byte* q) {
      if (auto st = home.lock()) {
        std::lock_guard<std::mutex> lk(st->mu);
        if (st->kept + cap <= st->limit) {
          try {
            st->free.emplace(cap, q);
            st->kept += cap;
            return;
          } catch (...) {  // a deleter must not throw: release it instead
          }
        }
      }
      release(q);
    });
  }

 private:
  static void* aligned(std::size_t bytes) { return std::aligned_alloc(64, bytes); }
  static void freed(void* p) { std::free(p); }

  struct State {
    std::mutex mu;
    std::multimap<std::size_t, std::byte*> free;
    std::size_t kept = 0, limit = 0;
    Release release = freed;
    ~State() {
      for (auto& [cap, p] : free) release(p);
    }
  };
  Allocate allocate_;
  std::shared_ptr<State> st_;
};

} // namespace chorus
