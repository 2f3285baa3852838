#include "transport/poller.hpp"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <thread>

namespace chorus {

namespace {
constexpr std::chrono::milliseconds kSlice{10};  // the longest a leader sleeps before looking again

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

int timeout_ms(Clock::time_point until) {
  auto left = until - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(std::min<Clock::duration>(left, kSlice)).count();
  return static_cast<int>(ms);
}
} // namespace

Poller::Poller() {
  ep_ = epoll_create1(EPOLL_CLOEXEC);
  efd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (ep_ < 0 || efd_ < 0) throw std::runtime_error("cannot create the data plane's poller");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the eventfd
  epoll_ctl(ep_, EPOLL_CTL_ADD, efd_, &ev);
}

Poller::~Poller() {
  stop();
  if (bg_.joinable()) bg_.join();
  ::close(ep_);
  ::close(efd_);
}

void Poller::start(const std::vector<Connection*>& conns, Patience patience) {
  patience_ = patience;
  for (Connection* c : conns) {
    if (!c) continue;
    if (c->spins()) {
      spinning_.push_back(c);
    } else {
      lone_socket_ = sockets_ ? nullptr : c;
      sockets_ = true;
    }
    ready_.push_back(c);  // the handshake may have read bytes past its own (TLS): look at once
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.ptr = c;
    epoll_ctl(ep_, EPOLL_CTL_ADD, c->wait_fd(), &ev);
  }
  bg_ = run_on_spare_thread([this] {
    pthread_setname_np(pthread_self(), "chorus-poll");
    background();
  });
}

void Poller::stop() {
  if (stopping_.exchange(true)) return;
  signal_eventfd(efd_);
  standby_.set(standby_.value.load() + 1);
  // Whoever leads (the background thread too) notices stopping_ within a slice and lets go; no
  // lead after this pumps. The background thread then ends by itself: the destructor joins it, so
  // a retiring epoch does not wait here for a thread to be scheduled on a busy host.
  std::lock_guard<std::mutex> lk(lead_mu_);
  stopped_ = true;
}

template <class Done>
void Poller::lead(WaitWord* watched, Done done, Clock::time_point until, bool spin) {
  if (stopped_) return;
  // Undone however we leave (a pump cannot throw, but be safe): the next leader starts clean.
  struct Watch {
    WaitWord* w;
    Watch(WaitWord* word, int fd) : w(word) {
      if (w) w->watcher.store(fd, std::memory_order_seq_cst);
      tl_leads_poller = true;
    }
    ~Watch() {
      tl_leads_poller = false;
      if (w) w->watcher.store(-1, std::memory_order_seq_cst);
    }
  } watch(watched, efd_);
  epoll_event evs[16];
  std::vector<Connection*> now;
  while (!done() && !stopping_.load() && Clock::now() < until) {
    // Shared-memory connections: a waiting thread looks at them for a moment (no system call)
    // before it sleeps; then each is armed, so its writer wakes us through its socket.
    if (ready_.empty() && !spinning_.empty()) {
      const bool yield = patience_.yield.count() > 0;
      const auto spin_until = watched ? Clock::now() + (yield ? patience_.yield : patience_.spin) : Clock::now();
      for (bool first = true;; first = false) {
        if (!first && yield) std::this_thread::yield();
        for (Connection* c : spinning_)
          if (c->ready()) ready_.push_back(c);
        if (!ready_.empty() || done() || Clock::now() >= spin_until) break;
      }
      if (done()) break;
      if (ready_.empty())
        for (Connection* c : spinning_)
          if (!c->arm()) ready_.push_back(c);
    }
    // Sockets: a waiting thread that may spin asks epoll again for a moment before it sleeps (a
    // system call each time, but an idle core's wake-up costs more: forced-network 1 KiB
    // all-reduce, 2 processes, mean 22.2 us sleeping at once, 20.6 with 20 us of this, 20.0 with
    // 200 us; the 90th percentile 34.6 -> 19.4 us).
    // Where threads outnumber cores it gives the core away between looks instead (4 processes on
    // 2 cores, 1 KiB: mean 147-181 -> 118-119 us, median 131-157 -> 92-94; mpi-tcp 104-122).
    int n = 0;
    const bool yield = patience_.spin.count() == 0;
    if (ready_.empty() && watched && spin && sockets_ && socket_spin_budget().count() > 0 &&
        (!yield || patience_.yield.count() > 0)) {
      const auto spin_until = Clock::now() + (yield ? patience_.yield : socket_spin_budget());
      auto pause = [yield] {
        if (yield) std::this_thread::yield();
      };
      if (Connection* c = lone_socket_) {
        // One socket: read it directly, which on success saves epoll's system call (forced-network
        // 1 KiB all-reduce, 2 processes, alternating runs: mean 22.7-25.6 -> 17.8-18.2 us, median
        // 19.4-21.4 -> 14.6-14.8; mpi-tcp 13.9-14.1 in the same minutes).
        auto r = Connection::Pumped::idle;
        while (r == Connection::Pumped::idle && !done() && Clock::now() < spin_until) {
          r = c->pump();
          if (r == Connection::Pumped::idle && !done()) pause();
        }
        if (r != Connection::Pumped::idle) {
          settle(c, r);
          continue;
        }
        if (done()) break;
      } else {
        while ((n = epoll_wait(ep_, evs, 16, 0)) == 0 && !done() && Clock::now() < spin_until) pause();
      }
    }
    if (n == 0) n = epoll_wait(ep_, evs, 16, ready_.empty() && !done() ? timeout_ms(until) : 0);
    for (Connection* c : spinning_) c->disarm();
    if (n < 0 && errno != EINTR) {  // should not happen; do not spin on it
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    now.swap(ready_);  // now was left empty: ready_ starts this round empty
    for (int i = 0; i < n; ++i) {
      auto* c = static_cast<Connection*>(evs[i].data.ptr);
      if (!c) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = ::read(efd_, &v, sizeof v);
      } else if (std::find(now.begin(), now.end(), c) == now.end()) {
        now.push_back(c);
      }
    }
    for (Connection* c : now) settle(c, c->pump());
    now.clear();
  }
}

void Poller::settle(Connection* c, Connection::Pumped r) {
  if (r == Connection::Pumped::more) ready_.push_back(c);
  if (r == Connection::Pumped::ended || r == Connection::Pumped::parked) {  // nothing more to read here
    epoll_ctl(ep_, EPOLL_CTL_DEL, c->wait_fd(), nullptr);
    spinning_.erase(std::remove(spinning_.begin(), spinning_.end(), c), spinning_.end());
    if (c == lone_socket_) lone_socket_ = nullptr;
  }
}

bool Poller::wait(WaitWord& w, uint32_t target, Clock::time_point deadline, bool spin) {
  // seq_cst: pairs with WaitWord::set's look at the watcher (one of the two sees the other).
  return wait_until(w, [&] { return w.value.load(std::memory_order_seq_cst) >= target; }, deadline, spin);
}

bool Poller::wait_change(WaitWord& w, uint32_t seen, Clock::time_point deadline, bool spin) {
  return wait_until(w, [&] { return w.value.load(std::memory_order_seq_cst) != seen; }, deadline, spin);
}

template <class Reached>
bool Poller::wait_until(WaitWord& w, Reached reached, Clock::time_point deadline, bool spin) {
  want_.fetch_add(1);
  bool poked = false, registered = false;
  while (!reached() && Clock::now() < deadline) {
    if (std::unique_lock<std::mutex> lk(lead_mu_, std::try_to_lock); lk.owns_lock() && !stopping_.load()) {
      if (registered) {
        std::lock_guard<std::mutex> sl(sleepers_mu_);
        sleepers_.erase(std::find(sleepers_.begin(), sleepers_.end(), &w));
        registered = false;
      }
      want_.fetch_sub(1);
      lead(&w, reached, deadline, spin);
      last_led_.store(now_ns());
      want_.fetch_add(1);
      lk.unlock();
      nudge_sleepers();  // one of them leads next
      continue;
    }
    // Someone leads and pumps for us too: the background thread gives way when poked; another
    // waiting thread nudges us when it stops.
    if (!registered) {
      std::lock_guard<std::mutex> lk(sleepers_mu_);
      sleepers_.push_back(&w);
      registered = true;
    }
    if (!poked) {
      signal_eventfd(efd_);
      poked = true;
    }
    const uint32_t seen = w.value.load(std::memory_order_acquire);
    if (reached()) break;
    // Short: a nudge that comes between our look at the lead and this sleep is lost.
    w.sleep(seen, std::min(deadline, Clock::now() + std::chrono::milliseconds(1)));
  }
  if (registered) {
    std::lock_guard<std::mutex> lk(sleepers_mu_);
    sleepers_.erase(std::find(sleepers_.begin(), sleepers_.end(), &w));
  }
  want_.fetch_sub(1);
  return reached();
}

void Poller::nudge_sleepers() {
  std::lock_guard<std::mutex> lk(sleepers_mu_);
  for (WaitWord* w : sleepers_) w->nudge();
}

void Poller::background() {
  const auto far = [] { return Clock::now() + std::chrono::hours(24); };
  while (!stopping_.load()) {
    const uint32_t seen = standby_.value.load();
    const bool idle = now_ns() - last_led_.load() >= std::chrono::nanoseconds(kIdle).count();
    if (want_.load() == 0 && idle) {
      if (std::unique_lock<std::mutex> lk(lead_mu_, std::try_to_lock); lk.owns_lock()) {
        lead(nullptr, [this] { return want_.load() != 0; }, far(), false);
        lk.unlock();
        nudge_sleepers();
        continue;
      }
    }
    standby_.sleep(seen, Clock::now() + kIdle);
  }
}

} // namespace chorus
