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

#include "core/log.hpp"
#include "transport/socket.hpp"
#include "transport/tls/tls_channel.hpp"

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
  // fd[i] carries TLS: dir[i] holds what was decrypted from it, sealed[i] the records still to
  // be written to it (from sealed_at[i] on: handshake flights, then dir[1 - i] encrypted).
  std::unique_ptr<TlsChannel> tls[2];
  std::string sealed[2];
  std::size_t sealed_at[2] = {0, 0};
  Clock::time_point handshake_by{};  // a channel still in its handshake must be done by then
  bool handshaking() const {
    return (tls[0] && !tls[0]->established()) || (tls[1] && !tls[1]->established());
  }
  bool has_sealed(int side) const { return sealed_at[side] < sealed[side].size(); }
  uint64_t taken[2] = {0, 0};  // bytes read (decrypted) from each side so far
  // One side ended: only what it sent is still delivered (what was on its way to it has nobody
  // to read it), then the pair closes.
  bool closing() const { return dir[0].eof || dir[1].eof; }
};

struct Accepting {
  int listener;
  int other;
  std::function<bool(int)> ok{};
  std::chrono::milliseconds silence;
  std::unique_ptr<TlsChannel> other_tls;
};

struct Command {
  enum Kind { add, accept, cancel } kind;
  int a = -1, b = -1;
  uint64_t token = 0;
  std::unique_ptr<StreamGuard> guard{};
  std::function<bool(int)> ok{};
  std::chrono::milliseconds silence{0};
  std::unique_ptr<TlsChannel> tls{};  // add: a's; accept: b's
  std::chrono::milliseconds handshake_limit{0};  // add: for a's TLS handshake
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
  std::size_t watched_for_silence = 0;  // pairs with a silence limit or a handshake in progress
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
      if (p.handshaking()) {
        const auto left = p.handshake_by - now;
        if (left <= Clock::duration::zero()) {
          CHORUS_LOG(info, net, LogWhere{},
                     "relay: " + peer_address(p.fd[p.tls[0] ? 0 : 1]) + " did not finish the TLS handshake in time");
          close_pair(it);
          it = next;
          continue;
        }
        wait = std::min(wait, std::chrono::ceil<std::chrono::milliseconds>(left));
      }
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
        start_pair(c.a, c.b, c.silence, std::move(c.guard), std::move(c.tls), nullptr, c.handshake_limit);
      } else if (c.kind == Command::accept) {
        accepting[c.token] = {c.a, c.b, std::move(c.ok), c.silence, std::move(c.tls)};
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
    auto other_tls = std::move(it->second.other_tls);
    ::close(it->second.listener);
    accepting.erase(it);
    // Still counted: it was counted as a pair from add_after_accept.
    start_pair(c, other, silence, nullptr, nullptr, std::move(other_tls));
  }

  void start_pair(int a, int b, std::chrono::milliseconds silence, std::unique_ptr<StreamGuard> guard,
                  std::unique_ptr<TlsChannel> a_tls, std::unique_ptr<TlsChannel> b_tls,
                  std::chrono::milliseconds handshake_limit = std::chrono::milliseconds{0}) {
    const uint64_t id = next_id++;
    auto p = std::make_unique<Pair>();
    p->guard = std::move(guard);
    p->fd[0] = a;
    p->fd[1] = b;
    p->tls[0] = std::move(a_tls);
    p->tls[1] = std::move(b_tls);
    p->silence = silence;
    p->heard = Clock::now();
    p->handshake_by = p->heard + handshake_limit;
    if (silence.count() > 0 || p->handshaking()) ++watched_for_silence;
    for (int side = 0; side < 2; ++side) {
      set_nonblocking(p->fd[side]);
      epoll_event ev{};
      ev.events = interest(*p, side);
      ev.data.u64 = id << 1 | static_cast<uint64_t>(side);
      epoll_ctl(ep, EPOLL_CTL_ADD, p->fd[side], &ev);
    }
    const bool sealed = p->tls[0] || p->tls[1];
    pairs.emplace(id, std::move(p));
    // A channel may hold records that came with its handshake: no socket event would tell of them.
    if (sealed) on_event(id, pairs[id]->tls[0] ? 0 : 1, EPOLLIN);
  }

  // Read from a side while its buffer has room and neither side ended; write to it while the
  // other side's buffer holds bytes (after an end, only those of the side that ended).
  // A TLS side is written its records, and the other side's bytes once its handshake is done.
  static uint32_t interest(const Pair& p, int side) {
    uint32_t e = 0;
    if (!p.closing() && p.dir[side].end < kRelayBuffer) e |= EPOLLIN;
    const Direction& in = p.dir[1 - side];
    const bool plain = !in.empty() && (!p.tls[side] || p.tls[side]->established());
    if ((plain || p.has_sealed(side)) && (!p.closing() || in.eof)) e |= EPOLLOUT;
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
    if (p.tls[side]) return read_sealed(p, side);
    const ssize_t r = recv(p.fd[side], d.data.get() + d.end, kRelayBuffer - d.end, 0);
    if (r > 0) return took(p, side, static_cast<std::size_t>(r));
    if (r == 0) d.eof = true;
    else if (errno != EAGAIN && errno != EINTR) {
      p.reset[side] = true;
      return false;
    }
    return true;
  }

  // n bytes (plaintext) arrived at dir[side]'s end. The guard sees them before any of it can be
  // written on (its reason was its to log).
  static bool took(Pair& p, int side, std::size_t n) {
    Direction& d = p.dir[side];
    if (side == 1 && p.silence.count() > 0) p.heard = Clock::now();
    p.taken[side] += n;
    if (side == 0 && p.guard && !p.guard->check(d.data.get() + d.end, n).empty()) return false;
    if (side == 1 && p.guard) p.guard->observe(d.data.get() + d.end, n);
    d.end += n;
    return true;
  }

  // A TLS side: its handshake moves on with what came, then records are decrypted into dir[side]
  // while there is room (the rest waits in the channel, taken once the other side drained some).
  static bool read_sealed(Pair& p, int side) {
    TlsChannel& tls = *p.tls[side];
    Direction& d = p.dir[side];
    bool fresh = !tls.established();  // ciphertext came that the handshake has not seen (or none yet)
    for (;;) {
      if (!tls.established() && fresh) {
        bool done = false;
        std::string flight;
        const Status st = tls.step(flight, done);
        p.sealed[side] += flight;
        if (!st) {
          CHORUS_LOG(info, net, LogWhere{}, "relay: TLS with " + peer_address(p.fd[side]) + ": " + st.message());
          // The alert that says why, best effort, before the close.
          if (p.has_sealed(side))
            (void)send(p.fd[side], p.sealed[side].data() + p.sealed_at[side], p.sealed[side].size() - p.sealed_at[side],
                       MSG_NOSIGNAL | MSG_DONTWAIT);
          return false;
        }
        fresh = false;
      }
      if (tls.established()) {
        if (d.end == kRelayBuffer) return true;
        std::string why;
        const long got = tls.decrypt(d.data.get() + d.end, kRelayBuffer - d.end, why);
        if (got < 0) {
          CHORUS_LOG(info, net, LogWhere{}, "relay: TLS from " + peer_address(p.fd[side]) + ": " + why);
          return false;
        }
        if (got > 0) {
          if (!took(p, side, static_cast<std::size_t>(got))) return false;
          continue;
        }
      }
      std::size_t room = 0;
      char* at = tls.input(room);
      if (room == 0) return true;  // not reached: 64 KiB always hold a whole record
      const ssize_t r = recv(p.fd[side], at, room, 0);
      if (r == 0) {
        d.eof = true;
        return true;
      }
      if (r < 0) {
        if (errno == EAGAIN || errno == EINTR) return true;
        p.reset[side] = true;
        return false;
      }
      if (side == 1 && p.silence.count() > 0) p.heard = Clock::now();  // records count, whole or not
      tls.received(static_cast<std::size_t>(r));
      fresh = true;
    }
  }

  // Writes what dir[from] holds to the other side (encrypted first when that side carries TLS,
  // once its handshake is done); false on an error.
  static bool write_to_other(Pair& p, int from) {
    const int to = 1 - from;
    Direction& d = p.dir[from];
    if (p.tls[to]) {
      std::string& out = p.sealed[to];
      if (!p.has_sealed(to) && !d.empty() && p.tls[to]->established()) {
        out.clear();
        p.sealed_at[to] = 0;
        std::string why;
        if (!p.tls[to]->encrypt(d.data.get() + d.begin, d.end - d.begin, out, why)) {
          CHORUS_LOG(warn, net, LogWhere{}, "relay: TLS to " + peer_address(p.fd[to]) + ": " + why);
          return false;
        }
        d.begin = d.end = 0;
      }
      return !p.has_sealed(to) || send_some(p, to, out.data(), out.size(), p.sealed_at[to]);
    }
    if (d.empty()) return true;
    if (!send_some(p, to, d.data.get(), d.end, d.begin)) return false;
    if (d.empty()) d.begin = d.end = 0;
    return true;
  }

  // Sends data[at, end) to fd[to] as far as it takes, moving `at`; false when its end is gone.
  static bool send_some(Pair& p, int to, const char* data, std::size_t end, std::size_t& at) {
    const ssize_t w = send(p.fd[to], data + at, end - at, MSG_NOSIGNAL);
    if (w >= 0) at += static_cast<std::size_t>(w);
    else if (errno != EAGAIN && errno != EINTR) p.reset[to] = true;
    return w >= 0 || errno == EAGAIN || errno == EINTR;
  }

  void on_event(uint64_t id, int side, uint32_t events) {
    auto it = pairs.find(id);
    if (it == pairs.end()) return;  // closed earlier in this batch
    Pair& p = *it->second;
    bool ok = (events & EPOLLERR) == 0;
    if (!ok) p.reset[side] = true;
    // A hang-up with a full buffer can never be read: left alone it would fire forever.
    if (ok && (events & EPOLLHUP) && p.dir[side].end == kRelayBuffer) ok = false;
    const bool was_handshaking = p.handshaking();
    if (ok && (events & (EPOLLIN | EPOLLHUP)) && !p.closing()) ok = read_side(p, side) && write_to_other(p, side);
    if (ok && (events & EPOLLOUT)) ok = write_to_other(p, 1 - side);
    // A handshake flight, or the other side's bytes that waited for the handshake's end.
    if (ok && p.tls[side]) ok = write_to_other(p, 1 - side);
    // Records the channel holds beyond what dir had room for (a read takes up to 64 KiB of
    // records, dir holds 16 KiB of plaintext), for as long as the other side takes them: no
    // socket event would tell of them.
    for (int s = 0; s < 2 && ok; ++s)
      while (ok && p.tls[s] && p.tls[s]->established() && !p.closing() && p.dir[s].end < kRelayBuffer &&
             p.tls[s]->buffered()) {
        const uint64_t before = p.taken[s];
        ok = read_side(p, s) && write_to_other(p, s);
        if (p.taken[s] == before) break;  // only part of a record: the rest is still on the wire
      }
    // The orchestrator's end closed before the client's TLS was set up: nothing can reach either.
    if (ok && p.closing() && p.handshaking()) ok = false;
    if (was_handshaking && !p.handshaking() && p.silence.count() == 0) --watched_for_silence;
    for (int s = 0; s < 2 && ok; ++s)
      if (p.dir[s].eof && p.dir[s].empty() && !p.has_sealed(1 - s)) ok = false;  // all the ended side sent is delivered
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
    if (it->second->silence.count() > 0 || it->second->handshaking()) --watched_for_silence;
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

void Relay::add(int a, int b, std::unique_ptr<StreamGuard> guard, std::unique_ptr<TlsChannel> a_tls,
                std::chrono::milliseconds handshake_limit) {
  ++impl_->count;  // counted at once: the door's limits see it before the thread does
  Command c{Command::add, a, b, 0};
  c.guard = std::move(guard);
  c.tls = std::move(a_tls);
  c.handshake_limit = handshake_limit;
  impl_->post(std::move(c));
}

uint64_t Relay::add_after_accept(int listener, int b, std::function<bool(int)> accept_ok,
                                 std::chrono::milliseconds silence, std::unique_ptr<TlsChannel> b_tls) {
  const uint64_t token = impl_->next_token++;
  ++impl_->count;
  Command c{Command::accept, listener, b, token};
  c.ok = std::move(accept_ok);
  c.silence = silence;
  c.tls = std::move(b_tls);
  impl_->post(std::move(c));
  return token;
}

void Relay::cancel(uint64_t token) { impl_->post(Command{Command::cancel, -1, -1, token}); }

std::size_t Relay::pairs() const { return impl_->count.load(); }

} // namespace chorus
