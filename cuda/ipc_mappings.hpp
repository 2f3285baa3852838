// Other processes' GPU buffers as this process has them mapped (CUDA IPC), kept across ops:
// opening a handle costs a driver round trip, and a job runs its ops over the same buffers again
// and again. The driver maps a piece of memory once per process, so a stale mapping (its exporter
// freed the buffer and its memory came back in a new one) makes the new handle's open fail as
// "already mapped": then the mappings no op holds are closed and the open is tried once more, as
// UCX's cuda_ipc cache does. Plain C++ (the calls into CUDA are passed in), so its tests run
// without a GPU.
#pragma once
#include <array>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include <chorus/status.hpp>

#include "core/wait.hpp"

namespace chorus::gpu {

inline constexpr std::size_t kIpcHandleBytes = 64;  // CUDA_IPC_HANDLE_SIZE
using IpcHandle = std::array<unsigned char, kIpcHandleBytes>;

class IpcMappings {
 public:
  struct Calls {
    // Maps `h` on `device`; *already_mapped when the driver refuses it as mapped already.
    std::function<Status(int device, const IpcHandle& h, void** base, bool* already_mapped)> open;
    std::function<void(int device, void* base)> close;
  };
  // At most `keep_open` mappings are kept beyond those in use (the least recently used go first).
  IpcMappings(Calls calls, std::size_t keep_open) : calls_(std::move(calls)), keep_(keep_open) {}

  // `h` mapped on `device` (opened on first use), held until release(): a held mapping is never
  // closed. Waits at most until `deadline` for another thread opening the same handle.
  Status acquire(int device, const IpcHandle& h, void** base, Clock::time_point deadline);
  void release(int device, const IpcHandle& h);

  // Closes every mapping no op holds (the GPU layer's teardown); returns how many.
  std::size_t close_idle();

  std::size_t mapped() const;        // mappings open now
  std::size_t held() const;          // of them, held by an op
  uint64_t stale_closed() const;     // mappings closed because a new handle's open collided

 private:
  using Key = std::pair<int, IpcHandle>;
  struct Entry {
    void* base = nullptr;
    int holds = 0;
    bool opening = true;  // another thread is opening it
    uint64_t used = 0;    // when last acquired (a counter)
  };
  // Removes (under mu_) the mappings of `device` (any device: -1) that no op holds, past `keep`;
  // the caller closes what it returns, outside the lock.
  std::vector<std::pair<int, void*>> take_idle(int device, std::size_t keep);
  void close_all(const std::vector<std::pair<int, void*>>& victims);

  Calls calls_;
  std::size_t keep_;
  mutable std::mutex mu_;
  std::condition_variable opened_;
  std::map<Key, Entry> map_;
  uint64_t clock_ = 0, stale_closed_ = 0;
};

} // namespace chorus::gpu
