#include "observability/flight/flight_writer.hpp"

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <mutex>
#include <thread>

#include "observability/flight/flight_file.hpp"

namespace chorus {

namespace {

struct Job {
  std::string path;
  FlightDump dump;
  LogWhere where;
};

void serve(const Job& j) {
  auto done = write_flight_file(j.path, j.dump);
  if (done) CHORUS_LOG(warn, op, j.where, "flight recorder written to " + *done);
  else CHORUS_LOG(warn, op, j.where, "flight recorder not written: " + done.status().message());
}

// The process's writer. Never destroyed (a dump may be queued while static objects go away);
// its thread is detached, and exit() flushes it first (atexit, below).
struct Writer {
  std::mutex mu;
  std::condition_variable cv;    // the thread waits for jobs, flush() for `written`
  std::deque<Job> jobs;          // under mu
  uint64_t queued = 0, written = 0;  // under mu
  pid_t thread_of = 0;           // the process whose thread serves the queue (a fork has none)

  void run() {
    std::unique_lock<std::mutex> lk(mu);
    for (;;) {
      cv.wait(lk, [&] { return !jobs.empty(); });
      Job j = std::move(jobs.front());
      jobs.pop_front();
      lk.unlock();
      serve(j);
      lk.lock();
      ++written;
      cv.notify_all();
    }
  }
};

std::atomic<uint64_t> part_number{0};

Writer& writer() {
  static Writer* w = [] {
    (void)log_on(LogLevel::warn, Subsys::op);  // the log's own state first: it outlives our atexit
    auto* made = new Writer;
    std::atexit([] { (void)flush_flight_files(std::chrono::steady_clock::now() + std::chrono::seconds(2)); });
    return made;
  }();
  return *w;
}

} // namespace

Result<std::string> write_flight_file(const std::string& path, const FlightDump& d) {
  const std::string text = write_flight_dump(d);
  // A name of its own per write: a SIGUSR1 dump and a failure's may be written at once.
  const std::string tmp = path + ".part" + std::to_string(part_number.fetch_add(1));
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    if (!f.flush()) {
      std::remove(tmp.c_str());
      return Status(Errc::invalid_config, "the flight recorder cannot write " + tmp + " (flight_dir, CHORUS_FLIGHT_DIR)");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status(Errc::invalid_config, "the flight recorder cannot rename " + tmp + " to " + path);
  }
  return path;
}

void write_flight_file_later(std::string path, FlightDump d, LogWhere where) {
  Writer& w = writer();
  bool start = false;
  {
    std::lock_guard<std::mutex> lk(w.mu);
    w.jobs.push_back({std::move(path), std::move(d), where});
    ++w.queued;
    if (w.thread_of != ::getpid()) {
      w.thread_of = ::getpid();
      start = true;
    }
  }
  if (start) {
    try {
      std::thread([&w] { w.run(); }).detach();
    } catch (const std::system_error&) {  // no thread to be had: write it here, as before
      std::unique_lock<std::mutex> lk(w.mu);
      w.thread_of = 0;
      while (!w.jobs.empty()) {
        Job j = std::move(w.jobs.front());
        w.jobs.pop_front();
        lk.unlock();
        serve(j);
        lk.lock();
        ++w.written;
      }
      w.cv.notify_all();
      return;
    }
  }
  w.cv.notify_all();
}

bool flush_flight_files(std::chrono::steady_clock::time_point deadline) {
  Writer& w = writer();
  std::unique_lock<std::mutex> lk(w.mu);
  const uint64_t target = w.queued;
  return w.cv.wait_until(lk, deadline, [&] { return w.written >= target; });
}

} // namespace chorus
