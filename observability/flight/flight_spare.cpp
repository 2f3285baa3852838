#include "observability/flight/flight_spare.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>

namespace chorus {

struct FlightSpare::State {
  std::string dir;
  mutable std::mutex mu;  // a leaf; guards the four below
  mutable std::condition_variable ready;
  int fd = -1;
  pid_t pid = 0;          // the process that made fd (a forked child must not write its parent's)
  bool making = false;
  bool gone = false;      // the recorder went: a spare made now is closed
};

FlightSpare::FlightSpare(std::string dir) : st_(std::make_shared<State>()) {
  st_->dir = std::move(dir);
  refill(/*after_use=*/false);  // the process starts: the first failure may come soon
}

FlightSpare::~FlightSpare() {
  std::lock_guard<std::mutex> lk(st_->mu);
  st_->gone = true;
  if (st_->fd >= 0) ::close(st_->fd);
  st_->fd = -1;
  st_->ready.notify_all();  // a thread waiting to make the next one ends
}

int FlightSpare::take() {
  int fd = -1;
  {
    std::lock_guard<std::mutex> lk(st_->mu);
    if (st_->fd >= 0 && st_->pid == ::getpid()) fd = st_->fd;
    else if (st_->fd >= 0) ::close(st_->fd);
    st_->fd = -1;
  }
  refill(/*after_use=*/true);
  return fd;
}

bool FlightSpare::wait_ready(std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock<std::mutex> lk(st_->mu);
  return st_->ready.wait_until(lk, deadline, [&] { return st_->fd >= 0 || !st_->making; }) && st_->fd >= 0;
}

void FlightSpare::refill(bool after_use) {
  {
    std::lock_guard<std::mutex> lk(st_->mu);
    if (st_->making || st_->fd >= 0) return;
    st_->making = true;
  }
  auto st = st_;
  auto make = [st, after_use] {
    if (after_use) {
      // A failure just came: the job's recovery goes first. No dump comes within kDumpEvery of
      // the last, so the next spare waits that long (the making is a long kernel path, which a
      // lower priority alone does not keep out of the recovery), then yields to other threads.
      {
        std::unique_lock<std::mutex> lk(st->mu);
        if (st->ready.wait_for(lk, kDumpEvery, [&] { return st->gone; })) {
          st->making = false;
          st->ready.notify_all();
          return;
        }
      }
      // The lowest nice rather than SCHED_IDLE: a thread held off the core inside the file
      // system (ext4's journal, its orphan list) would hold up every process that uses it.
      setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);  // lowering needs no privilege
    }
    const int fd = ::open(st->dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0666);
    std::lock_guard<std::mutex> lk(st->mu);
    st->making = false;
    if (fd >= 0 && !st->gone) {
      st->fd = fd;
      st->pid = ::getpid();
    } else if (fd >= 0) {
      ::close(fd);
    }
    st->ready.notify_all();
  };
  try {
    std::thread(make).detach();
  } catch (const std::system_error&) {  // no thread to be had: no spare, dumps make their file
    std::lock_guard<std::mutex> lk(st_->mu);
    st_->making = false;
    st_->ready.notify_all();
  }
}

} // namespace chorus
