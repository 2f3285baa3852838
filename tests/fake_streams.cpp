#include "fake_streams.hpp"

#include <iterator>

namespace chorus::fake {

void FakeStream::hold_earlier_work() {
  std::lock_guard<std::mutex> lk(mu_);
  earlier_done_ = false;
}

void FakeStream::finish_earlier_work() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    earlier_done_ = true;
  }
  cv_.notify_all();
}

bool FakeStream::wait_until_waiting(int n, std::chrono::milliseconds at_most) {
  std::unique_lock<std::mutex> lk(mu_);
  return cv_.wait_for(lk, at_most, [&] { return waiting_ >= n; });
}

void FakeStream::on_release(std::function<void()> fn) {
  std::lock_guard<std::mutex> lk(mu_);
  on_release_ = std::move(fn);
}

std::vector<uint32_t> FakeStream::released() const {
  std::lock_guard<std::mutex> lk(mu_);
  return released_;
}

int FakeStream::marks() const {
  std::lock_guard<std::mutex> lk(mu_);
  return marks_;
}

Status FakeStreams::enqueue(void* stream, gpu::StreamMark& m) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!fail_.is_ok()) return fail_;
  auto* s = static_cast<FakeStream*>(stream);
  std::lock_guard<std::mutex> slk(s->mu_);
  words_.push_back(std::make_unique<uint32_t>(0));
  m = gpu::StreamMark{stream, stream, words_.back().get(), ++s->next_target_};
  ++s->marks_;
  return Status::ok();
}

Status FakeStreams::wait_started(const gpu::StreamMark& m, Clock::time_point deadline) {
  auto* s = static_cast<FakeStream*>(m.event);
  std::unique_lock<std::mutex> lk(s->mu_);
  ++s->waiting_;
  s->cv_.notify_all();
  auto before_released = [&] {  // targets 1 .. m.target-1 all let go on
    return s->released_set_.size() >= m.target - 1 &&
           (m.target == 1 || *std::next(s->released_set_.begin(), m.target - 2) == m.target - 1);
  };
  bool done = s->cv_.wait_until(lk, deadline, [&] { return s->earlier_done_ && before_released(); });
  --s->waiting_;
  if (!done) return {Errc::timeout, "the work queued on OpOptions::stream before the op did not finish in time"};
  return Status::ok();
}

void FakeStreams::release(gpu::StreamMark& m) {
  auto* s = static_cast<FakeStream*>(m.stream);
  std::lock_guard<std::mutex> lk(s->mu_);
  if (s->on_release_) s->on_release_();
  *m.word = m.target;
  s->released_.push_back(m.target);
  s->released_set_.insert(m.target);
  s->cv_.notify_all();
  m = gpu::StreamMark{};
}

void FakeStreams::fail_enqueues_with(Status s) {
  std::lock_guard<std::mutex> lk(mu_);
  fail_ = std::move(s);
}

} // namespace chorus::fake
