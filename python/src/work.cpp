#include "work.hpp"

#include <condition_variable>
#include <deque>
#include <thread>

#include "errors.hpp"

namespace chorus::python {

namespace {

// The threads that complete futures: chorus's completion callback only queues the Work here. A
// future's callbacks run on the thread that completes it, and one may wait for another future
// (DDP's PowerSGD hook waits for an all-reduce it starts): so a completion that finds no thread
// idle gets a new one, and no completion waits behind a callback. The threads stay until stop();
// there are as many as callbacks ever ran at once, plus one.
class FutureThreads {
 public:
  static FutureThreads& get() {
    static FutureThreads* t = new FutureThreads;  // never destroyed: stop() ends its threads
    return *t;
  }
  void post(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      queue_.push_back(std::move(fn));
      if (queue_.size() > idle_ + starting_) {
        ++starting_;
        threads_.emplace_back([this] { run(); });
      }
    }
    cv_.notify_one();
  }
  // Ends the threads once the queue is empty (a callback still running is waited for; one that
  // stops from a pool thread leaves that thread to end by itself). Posts meanwhile still run.
  void stop() {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopping_ = true;
      threads.swap(threads_);
    }
    cv_.notify_all();
    for (auto& t : threads) {
      if (t.get_id() == std::this_thread::get_id()) {
        t.detach();
        tl_leave = true;  // this thread ends once its callback returns
      } else {
        t.join();
      }
    }
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = false;
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lk(mu_);
    --starting_;
    for (;;) {
      ++idle_;
      cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
      --idle_;
      if (queue_.empty()) return;
      auto fn = std::move(queue_.front());
      queue_.pop_front();
      lk.unlock();
      fn();
      lk.lock();
      if (tl_leave) return;
    }
  }
  static inline thread_local bool tl_leave = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;      // threads waiting for work
  size_t starting_ = 0;  // threads made, not yet waiting (each will take an entry)
  bool stopping_ = false;
};

} // namespace

void stop_future_thread() { FutureThreads::get().stop(); }

ChorusWork::ChorusWork(int rank, c10d::OpType type, const char* profiling_title, std::vector<chorus::Work> parts,
                       std::vector<at::Tensor> outputs, std::function<void()> after)
    : c10d::Work(rank, type, profiling_title),
      parts_(std::move(parts)),
      outputs_(std::move(outputs)),
      after_(std::move(after)) {}

ChorusWork::~ChorusWork() = default;

void ChorusWork::settle() {
  std::call_once(settled_, [&] {
    Status s;
    for (auto& p : parts_) {
      if (Status w = p.wait(); !w && s) s = std::move(w);  // every part is done: no wait here
    }
    if (s && after_) {
      try {
        after_();
      } catch (const std::exception& e) {
        s = Status(Errc::internal, std::string("copying the op's result out: ") + e.what());
      }
    }
    status_ = std::move(s);
    // The profiler's event ends with the op (c10d::Work's own finish() is not used here), before
    // anyone sees it done, so that a trace taken around wait() holds it.
    if (recordFunctionEndCallback_) {
      recordFunctionEndCallback_();
      recordFunctionEndCallback_ = nullptr;
    }
    done_.store(true, std::memory_order_release);
  });
}

bool ChorusWork::isCompleted() {
  if (done_.load(std::memory_order_acquire)) return true;
  for (auto& p : parts_)
    if (!p.test()) return false;
  settle();
  return true;
}

bool ChorusWork::isSuccess() const { return done_.load(std::memory_order_acquire) && status_.is_ok(); }

std::exception_ptr ChorusWork::exception() const {
  if (!done_.load(std::memory_order_acquire) || status_) return nullptr;
  return std::make_exception_ptr(Error(status_));
}

std::vector<at::Tensor> ChorusWork::result() { return outputs_; }

int ChorusWork::sourceRank() const {
  TORCH_CHECK(parts_.size() == 1, "sourceRank() is for the Work of a recv");
  auto r = parts_[0].source();
  if (!r) throw Error(r.status());
  return static_cast<int>(*r);
}

bool ChorusWork::wait(std::chrono::milliseconds timeout) {
  if (!done_.load(std::memory_order_acquire)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (auto& p : parts_) {
      if (timeout.count() <= 0) {
        (void)p.wait();  // the op's own timeout bounds it; its Status is settle()'s
        continue;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      Status w = p.wait_for(std::max(left, std::chrono::milliseconds(0)));
      if (w.code() == Errc::timeout && !p.test())
        throw Error(Status(Errc::timeout, "the op is still in flight after wait(" + std::to_string(timeout.count()) + " ms)"));
    }
    settle();
  }
  if (!status_) throw Error(status_);
  return true;
}

void ChorusWork::settle_when_done() {
  if (parts_.empty()) return settle();
  auto self = c10::intrusive_ptr<ChorusWork>::reclaim_copy(this);  // lives until settled
  unsettled_.store(parts_.size());
  for (auto& p : parts_)
    p.on_complete([self](const Status&) {
      if (self->unsettled_.fetch_sub(1) == 1) self->settle();
    });
}

c10::intrusive_ptr<c10::ivalue::Future> ChorusWork::getFuture() {
  std::lock_guard<std::mutex> lk(future_mu_);
  if (future_) return future_;
  future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  // The Work lives until its future is completed, whoever drops it first.
  auto self = c10::intrusive_ptr<ChorusWork>::reclaim_copy(this);
  auto complete = [self] {
    FutureThreads::get().post([self] {
      self->settle();
      if (self->status_)
        self->future_->markCompleted(c10::IValue(self->outputs_));
      else
        self->future_->setError(std::make_exception_ptr(Error(self->status_)));
    });
  };
  if (parts_.empty()) {
    complete();
    return future_;
  }
  remaining_.store(parts_.size());
  for (auto& p : parts_)
    p.on_complete([self, complete](const Status&) {
      if (self->remaining_.fetch_sub(1) == 1) complete();
    });
  return future_;
}

} // namespace chorus::python
