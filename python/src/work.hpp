// An op of the "chorus" backend as torch.distributed sees it (c10d::Work): one or more chorus
// ops and what runs once they are done (copying a staging buffer into the caller's tensors).
// wait() waits on the ops themselves (chorus's futex, no thread in between); the future of
// getFuture() (DDP's communication hooks chain on it) is completed from threads of this module,
// never from chorus's: a future's callbacks may run more ops, which chorus's completion callback
// must not.
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chorus/work.hpp>

namespace chorus::python {

class ChorusWork : public c10d::Work {
 public:
  // `outputs`: what result() and the future give; `after` runs once, after every part succeeded,
  // on the thread that first sees the op done. `profiling_title` (a string literal, or null):
  // torch.profiler's name of the op, recorded from here until the op is done.
  ChorusWork(int rank, c10d::OpType type, const char* profiling_title, std::vector<chorus::Work> parts,
             std::vector<at::Tensor> outputs, std::function<void()> after = {});
  ~ChorusWork() override;

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override {}
  // Waits for every part (up to `timeout`, 0: until each ends by its own op timeout); throws the
  // op's chorus.Error when it failed.
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  // A receive's sender (recvAnysource's, and a recv's src), once it is done.
  int sourceRank() const override;
  // Runs `after` as soon as the op is done, on the thread that completes it (before the group's
  // next op starts), also where nobody waits for this Work: a list the op fills is filled as
  // gloo's are. Call once, after construction.
  void settle_when_done();

 private:
  // Once every part is done: the first failure among them, else `after`'s outcome.
  void settle();

  std::vector<chorus::Work> parts_;
  std::vector<at::Tensor> outputs_;
  std::function<void()> after_;
  std::once_flag settled_;
  std::atomic<bool> done_{false};
  Status status_;  // written once, before done_
  std::mutex future_mu_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::atomic<size_t> remaining_{0};
  std::atomic<size_t> unsettled_{0};  // settle_when_done(): parts not done yet
};

// Stops the thread that completes futures (the module's teardown; a later future starts it again).
void stop_future_thread();

} // namespace chorus::python
