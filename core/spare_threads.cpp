#include "core/spare_threads.hpp"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace chorus {

struct SpareJob::Done {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread::id runner;  // the thread running the job (set before it starts)
};

SpareJob& SpareJob::operator=(SpareJob&& o) noexcept {
  if (this != &o) {
    if (joinable()) join();
    done_ = std::move(o.done_);
  }
  return *this;
}

SpareJob::~SpareJob() {
  if (joinable()) join();
}

void SpareJob::join() {
  if (!done_) throw std::system_error(std::make_error_code(std::errc::invalid_argument), "SpareJob::join: no job");
  std::unique_lock<std::mutex> lk(done_->mu);
  if (done_->runner == std::this_thread::get_id())
    throw std::system_error(std::make_error_code(std::errc::resource_deadlock_would_occur), "SpareJob::join from the job");
  done_->cv.wait(lk, [&] { return done_->done; });  // bounded by the job, as a thread's join
  lk.unlock();
  done_.reset();
}

namespace {

// A thread between jobs, on its own stack: whoever hands it a job takes it off the idle list.
struct Idle {
  std::condition_variable cv;
  std::function<void()> job;
  std::shared_ptr<SpareJob::Done> done;
  bool given = false;
  std::thread::id id = std::this_thread::get_id();  // the thread's own (spare_thread_idle)
};

// Never destroyed: a thread may still wait in it while static objects go away.
struct Pool {
  std::mutex mu;  // a leaf; guards the two below
  std::vector<Idle*> idle;
  std::condition_variable idle_grew;  // for spare_thread_idle
  pid_t pid = ::getpid();  // a forked child has none of its parent's threads
};

Pool* the_pool = nullptr;

Pool& pool() {
  static Pool* p = [] {
    the_pool = new Pool;
    // A fork while another thread holds the lock would leave it held for good in the child (whose
    // next job would wait forever): the fork waits for it, and parent and child let go after.
    pthread_atfork([] { the_pool->mu.lock(); }, [] { the_pool->mu.unlock(); }, [] { the_pool->mu.unlock(); });
    return the_pool;
  }();
  return *p;
}

void finish(const std::shared_ptr<SpareJob::Done>& d) {
  std::lock_guard<std::mutex> lk(d->mu);
  d->done = true;
  d->cv.notify_all();
}

void run(std::function<void()>& job, const std::shared_ptr<SpareJob::Done>& done) {
  {
    std::lock_guard<std::mutex> lk(done->mu);
    done->runner = std::this_thread::get_id();
  }
  job();
}

void serve(std::function<void()> job, std::shared_ptr<SpareJob::Done> done) {
  Pool& p = pool();
  Idle me;
  pthread_setname_np(pthread_self(), "chorus-spare");  // not its creator's name
  for (;;) {
    run(job, done);
    job = nullptr;  // what the job held goes now, not when the thread next works
    pthread_setname_np(pthread_self(), "chorus-spare");
    std::unique_lock<std::mutex> lk(p.mu);
    if (p.pid != ::getpid()) return finish(done);
    p.idle.push_back(&me);  // before the join returns: a job run after it takes this thread
    p.idle_grew.notify_all();
    lk.unlock();
    finish(done);
    done.reset();
    lk.lock();
    if (!me.cv.wait_for(lk, kSpareIdle, [&] { return me.given; })) {
      p.idle.erase(std::find(p.idle.begin(), p.idle.end(), &me));
      return;
    }
    me.given = false;
    job = std::move(me.job);
    done = std::move(me.done);
  }
}

} // namespace

SpareJob run_on_spare_thread(std::function<void()> job) {
  auto done = std::make_shared<SpareJob::Done>();
  Pool& p = pool();
  {
    std::lock_guard<std::mutex> lk(p.mu);
    if (p.pid != ::getpid()) {  // a forked child: its parent's idle threads are not here
      p.idle.clear();
      p.pid = ::getpid();
    }
    if (!p.idle.empty()) {
      Idle* w = p.idle.back();
      p.idle.pop_back();
      w->job = std::move(job);
      w->done = done;
      w->given = true;
      w->cv.notify_one();
      return SpareJob(done);
    }
  }
  std::thread(serve, std::move(job), done).detach();
  return SpareJob(done);
}

bool spare_thread_idle(std::thread::id id, std::chrono::milliseconds limit) {
  Pool& p = pool();
  std::unique_lock<std::mutex> lk(p.mu);
  return p.idle_grew.wait_for(lk, limit, [&] {
    return std::any_of(p.idle.begin(), p.idle.end(), [&](const Idle* w) { return w->id == id; });
  });
}

} // namespace chorus
