#include "cuda/ipc_mappings.hpp"

#include <algorithm>

namespace chorus::gpu {

Status IpcMappings::acquire(int device, const IpcHandle& h, void** base, Clock::time_point deadline) {
  const Key key{device, h};
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    auto it = map_.find(key);
    if (it == map_.end()) break;
    if (!it->second.opening) {
      ++it->second.holds;
      it->second.used = ++clock_;
      *base = it->second.base;
      return Status::ok();
    }
    if (opened_.wait_until(lk, deadline) == std::cv_status::timeout && Clock::now() >= deadline)
      return {Errc::timeout, "opening another process's buffer: another thread's open of it did not finish in time"};
  }
  map_.emplace(key, Entry{});  // opening: the same handle's acquirers wait for it
  lk.unlock();

  void* b = nullptr;
  bool already = false;
  Status st = calls_.open(device, h, &b, &already);
  if (!st && already) {
    // A stale mapping of the same memory is open here; the ones an op holds are live buffers.
    std::vector<std::pair<int, void*>> victims;
    {
      std::lock_guard<std::mutex> g(mu_);
      victims = take_idle(device, 0);
      stale_closed_ += victims.size();
    }
    close_all(victims);
    already = false;
    st = calls_.open(device, h, &b, &already);
  }

  std::vector<std::pair<int, void*>> victims;
  lk.lock();
  auto it = map_.find(key);
  if (!st) {
    map_.erase(it);
  } else {
    it->second = Entry{b, 1, false, ++clock_};
    *base = b;
    victims = take_idle(-1, keep_);
  }
  opened_.notify_all();
  lk.unlock();
  close_all(victims);
  return st;
}

void IpcMappings::release(int device, const IpcHandle& h) {
  std::lock_guard<std::mutex> g(mu_);
  if (auto it = map_.find(Key{device, h}); it != map_.end() && it->second.holds > 0) --it->second.holds;
}

std::vector<std::pair<int, void*>> IpcMappings::take_idle(int device, std::size_t keep) {
  std::vector<std::map<Key, Entry>::iterator> idle;
  for (auto it = map_.begin(); it != map_.end(); ++it)
    if (!it->second.opening && it->second.holds == 0 && (device < 0 || it->first.first == device)) idle.push_back(it);
  if (idle.size() <= keep) return {};
  std::sort(idle.begin(), idle.end(), [](auto a, auto b) { return a->second.used < b->second.used; });
  idle.resize(idle.size() - keep);  // the least recently used
  std::vector<std::pair<int, void*>> victims;
  for (auto it : idle) {
    victims.emplace_back(it->first.first, it->second.base);
    map_.erase(it);
  }
  return victims;
}

void IpcMappings::close_all(const std::vector<std::pair<int, void*>>& victims) {
  for (auto [d, p] : victims) calls_.close(d, p);
}

std::size_t IpcMappings::close_idle() {
  std::vector<std::pair<int, void*>> victims;
  {
    std::lock_guard<std::mutex> g(mu_);
    victims = take_idle(-1, 0);
  }
  close_all(victims);
  return victims.size();
}

std::size_t IpcMappings::mapped() const {
  std::lock_guard<std::mutex> g(mu_);
  return static_cast<std::size_t>(std::count_if(map_.begin(), map_.end(), [](auto& e) { return !e.second.opening; }));
}

std::size_t IpcMappings::held() const {
  std::lock_guard<std::mutex> g(mu_);
  return static_cast<std::size_t>(std::count_if(map_.begin(), map_.end(), [](auto& e) { return e.second.holds > 0; }));
}

uint64_t IpcMappings::stale_closed() const {
  std::lock_guard<std::mutex> g(mu_);
  return stale_closed_;
}

} // namespace chorus::gpu
