#include "engine/work_state.hpp"

namespace chorus {

void WorkState::complete(Status s) {
  std::vector<std::function<void(const Status&)>> run;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (is_done()) return;
    status = std::move(s);
    run.swap(callbacks_);
    // Done before the lock is let go: a callback handed in from now on (run at once) sees it so.
    // seq_cst, as a sleeper's count and look (WaitWord::sleep): set() below then reads the
    // sleepers after this store, not before it (a release store may pass that load).
    done.value.store(1, std::memory_order_seq_cst);
  }
  done.set(1);  // the value is there already: this wakes the sleepers and the watcher
  for (auto& fn : run) fn(status);
}

void WorkState::on_complete(std::function<void(const Status&)> fn) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!is_done()) {
      callbacks_.push_back(std::move(fn));
      return;
    }
  }
  fn(status);
}

namespace {
constexpr std::chrono::nanoseconds kNoSpin{0};
Status empty_work() { return {Errc::invalid_argument, "this Work names no op (default-constructed)"}; }
// Someone waits for an op that is not done without running it (a wait with a limit, a poll, a
// callback): its lane's thread should take it as soon as it can (WorkState::hurry).
void hurry_if_pending(WorkState& s) {
  if (s.hurry && !s.is_done()) s.hurry();
}
} // namespace

Status Work::wait() const {
  if (!state_) return empty_work();
  // Not started yet: run it here rather than wait to be woken by the lane's thread. (wait_for
  // does not: the op could outlast its limit.)
  if (state_->run_here && !state_->is_done() && state_->run_here() == Lane::Claim::stuck)
    return {Errc::invalid_argument,
            "Work::wait() for an op of a handle, on a thread that runs an earlier op of that handle (a "
            "callback of its Work, on_complete): the op starts only once that one returned, so the wait "
            "would never end (the op still runs: wait for it elsewhere)"};
  // The op itself is bounded by its timeout, so this ends: slices only keep each sleep finite.
  // No spin: the thread that runs the op (a lane's) wants this core more than a spinning waiter.
  while (!state_->done.wait_at_least(1, Clock::now() + std::chrono::seconds(1), kNoSpin)) {
  }
  return state_->status;
}

Status Work::wait_for(std::chrono::milliseconds limit) const {
  if (!state_) return empty_work();
  hurry_if_pending(*state_);
  if (!state_->done.wait_at_least(1, Clock::now() + limit, kNoSpin))
    return {Errc::timeout, "the op is still in flight after " + std::to_string(limit.count()) +
                               " ms (it goes on: wait for it again)"};
  return state_->status;
}

bool Work::test() const {
  if (!state_) return false;
  hurry_if_pending(*state_);
  return state_->is_done();
}

namespace {
Status not_done() { return {Errc::invalid_argument, "the op is still in flight: wait() for it first"}; }
} // namespace

Result<std::vector<Tensor>> Work::result() const {
  if (!state_) return empty_work();
  if (!state_->is_done()) return not_done();
  if (!state_->status) return state_->status;
  return state_->tensors;
}

Result<PeerId> Work::source() const {
  if (!state_) return empty_work();
  if (!state_->is_done()) return not_done();
  if (!state_->status) return state_->status;
  if (!state_->source) return Status(Errc::invalid_argument, "Work::source(): the op is not a receive");
  return *state_->source;
}

Result<std::vector<std::string>> Work::objects() const {
  if (!state_) return empty_work();
  if (!state_->is_done()) return not_done();
  if (!state_->status) return state_->status;
  return state_->objects;
}

void Work::on_complete(std::function<void(const Status&)> fn) const {
  if (!state_) {
    fn(empty_work());
    return;
  }
  hurry_if_pending(*state_);
  state_->on_complete(std::move(fn));
}

} // namespace chorus
