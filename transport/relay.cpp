#include "transport/relay.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace chorus {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kWake = ~uint64_t{0};
constexpr uint64_t kListenerBit = uint64_t{1} << 63;  // epoll data of a listener: the bit | its token

// Bytes read from one side of a pair, not yet written to the other.
struct Direction {
  std::unique_ptr<char[]> data{new char[kRelayBuffer]};
  std::size_t begin = 0, end = 0;
  bool eof = false;  // its reading side ended: nothing more comes
  bool empty() const { return begin == end; }
};

struct Pair {
  int fd[2];
  Direction dir[2];                  // dir[i]: from fd[i] to fd[1 - i]
  bool watched[2] = {true, true};    // in the epoll set
  bool reset[2] = {false, false};    // fd[i] failed (its peer reset or closed the connection)
  std::chrono::milliseconds silence{0};  // > 0: fd[1] silent this long closes the pair
  Clock::time_point heard{};             // when fd[1] last sent something
  std::unique_ptr<StreamGuard> guard;    // checks what fd[0] sends, observes fd[1] (may be null)
  // One side ended: only what it sent is still delivered (what was on its way to it has nobody
  // to read it), then the pair closes.
  bool closing() const { return dir[0].eof || dir[1].eof; }
};

struct Accepting {
  int listener;
  int other;
  std::function<bool(int)> ok;
  std::chrono::milliseconds silence;
};

struct Command {
  enum Kind { add, accept, cancel } kind;
  int a = -1, b = -1;
  uint64_t token = 0;
  std::unique_ptr<StreamGuard> guard;
  std::function<bool(int)> ok;
  std::chrono::milliseconds silence{0};
};

void set_nonblocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  int one = 1;  // relayed messages are small and must not wait for more
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

} // namespace

struct Relay::Impl {
  int ep = epoll_create1(EPOLL_CLOEXEC);
  int wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  std::mutex mu;  // guards commands and stopping
  std::vector<Command> commands;
  bool stopping = false;
  std::atomic<std::size_t> count{0};
  std::atomic<uint64_t> next_token{1};
  // Owned by the relay's thread.
  uint64_t next_id = 1;
  std::unordered_map<uint64_t, std::unique_ptr<Pair>> pairs;
  std::unordered_map<uint64_t, Accepting> accepting;
  std::size_t watched_for_silence = 0;  // pairs with a silence limit
  std::thread thread;

  Impl() {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kWake;
    epoll_ctl(ep, EPOLL_CTL_ADD, wake, &ev);
    thread = std::thread([this] { run(); });
  }

  void post(Command c) {
    {
      std::lock_guard<std::mutex> lk(mu);
      commands.push_back(std::move(c));
    }
    uint64_t one = 1;
    (void)!write(wake, &one, sizeof one);
  }

  void run() {
    epoll_event evs[64];
    int wait_ms = -1;
    for (;;) {
      const int n = epoll_wait(ep, evs, 64, wait_ms);
      for (int i = 0; i < n; ++i) {
        const uint64_t d = evs[i].data.u64;
        if (d == kWake) {
          if (!take_commands()) return close_everything();
        } else if (d & kListenerBit) {
          on_accept(d & ~kListenerBit);
        } else {
          on_event(d >> 1, static_cast<int>(d & 1), evs[i].events);
        }
      }
      wait_ms = close_silent();
    }
  }

  // Closes the pairs whose far side has been silent past its limit; returns how long epoll may
  // wait before the next limit runs out (-1: no pair has one).
  int close_silent() {
    if (watched_for_silence == 0) return -1;
    const auto now = Clock::now();
    auto wait = std::chrono::milliseconds(60000);
    for (auto it = pairs.begin(); it != pairs.end();) {
      auto next = std::next(it);
      Pair& p = *it->second;
      if (p.silence.count() > 0) {
        if (p.dir[1].end == kRelayBuffer) p.heard = now;  // a full buffer: this end not reading
        const auto left = p.heard + p.silence - now;
        if (left <= Clock::duration::zero()) close_pair(it);
        else wait = std::min(wait, std::chrono::ceil<std::chrono::milliseconds>(left));
      }
      it = next;
    }
    return static_cast<int>(wait.count());
  }

  // Applies what other threads asked for; false once the relay stops.
  bool take_commands() {
    uint64_t drained;
    (void)!read(wake, &drained, sizeof drained);
    std::vector<Command> todo;
    {
      std::lock_guard<std::mutex> lk(mu);
      if (stopping) return false;
      todo.swap(commands);
    }
    for (auto& c : todo) {
      if (c.kind == Command::add) {
        start_pair(c.a, c.b, std::chrono::milliseconds{0}, std::move(c.guard));
      } else if (c.kind == Command::accept) {
        accepting[c.token] = {c.a, c.b, std::move(c.ok), c.silence};
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = kListenerBit | c.token;
        epoll_ctl(ep, EPOLL_CTL_ADD, c.a, &ev);
      } else {
        drop_accepting(c.token);
      }
    }
    return true;
  }

  void drop_accepting(uint64_t token) {
    auto it = accepting.find(token);
    if (it == accepting.end()) return;
    ::close(it->second.listener);
    ::close(it->second.other);
    accepting.erase(it);
    --count;
  }

  void on_accept(uint64_t token) {
    auto it = accepting.find(token);
    if (it == accepting.end()) return;
    const int c = accept4(it->second.listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) return;
      return drop_accepting(token);  // out of descriptors: the connecting side sees its connection refused
    }
    if (!it->second.ok(c)) {
      ::close(c);
      return;
    }
    const int other = it->second.other;
    const auto silence = it->second.silence;
    ::close(it->second.listener);
    accepting.erase(it);
    start_pair(c, other, silence);  // still counted: it was counted as a pair from add_after_accept
  }

  void start_pair(int a, int b, std::chrono::milliseconds silence = std::chrono::milliseconds{0},
                  std::unique_ptr<StreamGuard> guard = nullptr) {
    const uint64_t id = next_id++;
    auto p = std::make_unique<Pair>();
    p->guard = std::move(guard);
    p->fd[0] = a;
    p->fd[1] = b;
    p->silence = silence;
    p->heard = Clock::now();
    if (silence.count() > 0) ++watched_for_silence;
    for (int side = 0; side < 2; ++side) {
      set_nonblocking(p->fd[side]);
      epoll_event ev{};
      ev.events = interest(*p, side);
      ev.data.u64 = id << 1 | static_cast<uint64_t>(side);
      epoll_ctl(ep, EPOLL_CTL_ADD, p->fd[side], &ev);
    }
    pairs.emplace(id, std::move(p));
  }

  // Read from a side while its buffer has room and neither side ended; write to it while the
  // other side's buffer holds bytes (after an end, only those of the side that ended).
  static uint32_t interest(const Pair& p, int side) {
    uint32_t e = 0;
    if (!p.closing() && p.dir[side].end < kRelayBuffer) e |= EPOLLIN;
    const Direction& in = p.dir[1 - side];
    if (!in.empty() && (!p.closing() || in.eof)) e |= EPOLLOUT;
    return e;
  }

  // Reads what fd[side] has into dir[side]; false on an error (the pair is then closed).
  static bool read_side(Pair& p, int side) {
    Direction& d = p.dir[side];
    if (d.eof) return true;
    if (d.end == kRelayBuffer && d.begin > 0) {
      std::memmove(d.data.get(), d.data.get() + d.begin, d.end - d.begin);
      d.end -= d.begin;
      d.begin = 0;
    }
    if (d.end == kRelayBuffer) return true;
    const ssize_t r = recv(p.fd[side], d.data.get() + d.end, kRelayBuffer - d.end, 0);
    if (r > 0 && side == 1 && p.silence.count() > 0) p.heard = Clock::now();
    // The guard sees the read before any of it can be written on (its reason was its to log).
    if (r > 0 && side == 0 && p.guard && !p.guard->check(d.data.get() + d.end, static_cast<std::size_t>(r)).empty())
      return false;
    if (r > 0 && side == 1 && p.guard) p.guard->observe(d.data.get() + d.end, static_cast<std::size_t>(r));
    if (r > 0) d.end += static_cast<std::size_t>(r);
    else if (r == 0) d.eof = true;
    else if (errno != EAGAIN && errno != EINTR) {
      p.reset[side] = true;
      return false;
    }
    return true;
  }

  // Writes what dir[from] holds to the other side; false on an error.
  static bool write_to_other(Pair& p, int from) {
    Direction& d = p.dir[from];
    if (d.empty()) return true;
    const ssize_t w = send(p.fd[1 - from], d.data.get() + d.begin, d.end - d.begin, MSG_NOSIGNAL);
    if (w < 0 && errno != EAGAIN && errno != EINTR) p.reset[1 - from] = true;  // its end is gone
    if (w < 0) return errno == EAGAIN || errno == EINTR;
    d.begin += static_cast<std::size_t>(w);
    if (d.empty()) d.begin = d.end = 0;
    return true;
  }

  void on_event(uint64_t id, int side, uint32_t events) {
    auto it = pairs.find(id);
    if (it == pairs.end()) return;  // closed earlier in this batch
    Pair& p = *it->second;
    bool ok = (events & EPOLLERR) == 0;
    if (!ok) p.reset[side] = true;
    // A hang-up with a full buffer can never be read: left alone it would fire forever.
    if (ok && (events & EPOLLHUP) && p.dir[side].end == kRelayBuffer) ok = false;
    if (ok && (events & (EPOLLIN | EPOLLHUP)) && !p.closing()) ok = read_side(p, side) && write_to_other(p, side);
    if (ok && (events & EPOLLOUT)) ok = write_to_other(p, 1 - side);
    for (int s = 0; s < 2 && ok; ++s)
      if (p.dir[s].eof && p.dir[s].empty()) ok = false;  // all the ended side sent is delivered
    if (!ok) return close_pair(it);
    for (int s = 0; s < 2; ++s) {
      epoll_event ev{};
      ev.events = interest(p, s);
      ev.data.u64 = id << 1 | static_cast<uint64_t>(s);
      // A side with nothing to do is left out of the set: its hang-up would fire forever.
      if (ev.events == 0) {
        if (p.watched[s]) epoll_ctl(ep, EPOLL_CTL_DEL, p.fd[s], nullptr);
      } else {
        epoll_ctl(ep, p.watched[s] ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, p.fd[s], &ev);
      }
      p.watched[s] = ev.events != 0;
    }
  }

  void close_pair(std::unordered_map<uint64_t, std::unique_ptr<Pair>>::iterator it) {
    if (it->second->silence.count() > 0) --watched_for_silence;
    if (const Pair& p = *it->second; p.guard) p.guard->ended((p.dir[0].eof || p.reset[0]) && !p.dir[1].eof && !p.reset[1]);
    ::close(it->second->fd[0]);
    ::close(it->second->fd[1]);
    pairs.erase(it);
    --count;
  }

  void close_everything() {
    while (!pairs.empty()) close_pair(pairs.begin());
    while (!accepting.empty()) drop_accepting(accepting.begin()->first);
  }
};

Relay::Relay() : impl_(std::make_unique<Impl>()) {}

Relay::~Relay() {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->stopping = true;
  }
  uint64_t one = 1;
  (void)!write(impl_->wake, &one, sizeof one);
  impl_->thread.join();
  for (auto& c : impl_->commands) {  // posted after the thread's last look
    if (c.a >= 0) ::close(c.a);
    if (c.b >= 0) ::close(c.b);
  }
  ::close(impl_->ep);
  ::close(impl_->wake);
}

void Relay::add(int a, int b, std::unique_ptr<StreamGuard> guard) {
  ++impl_->count;  // counted at once: the door's limits see it before the thread does
  Command c{Command::add, a, b, 0};
  c.guard = std::move(guard);
  impl_->post(std::move(c));
}

uint64_t Relay::add_after_accept(int listener, int b, std::function<bool(int)> accept_ok,
                                 std::chrono::milliseconds silence) {
  const uint64_t token = impl_->next_token++;
  ++impl_->count;
  Command c{Command::accept, listener, b, token};
  c.ok = std::move(accept_ok);
  c.silence = silence;
  impl_->post(std::move(c));
  return token;
}

void Relay::cancel(uint64_t token) { impl_->post(Command{Command::cancel, -1, -1, token}); }

std::size_t Relay::pairs() const { return impl_->count.load(); }

} // namespace chorus
