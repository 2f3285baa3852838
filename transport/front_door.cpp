#include "transport/front_door.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "core/log.hpp"
#include "core/wait.hpp"
#include "transport/door_handshake.hpp"
#include "transport/relay.hpp"
#include "transport/socket.hpp"

namespace chorus {

namespace {

constexpr uint64_t kListenTag = ~uint64_t{0};
constexpr uint64_t kWakeTag = ~uint64_t{0} - 1;
// File descriptors left to CAF and the rest of the process (a quarter of a small limit); each
// relayed connection costs three (the client's, the door's to BASP, BASP's own).
constexpr std::size_t kReservedFds = 64;
// Below this budget the daemon says so at start: a job of more nodes would wait at the door.
constexpr std::size_t kWarnBelow = 64;

// One connection in its handshake.
struct Guest {
  int fd = -1;
  int inner = -1;  // to the BASP port, once the answer was right
  Clock::time_point deadline;
  enum Stage { greet, listen, connect, tell } stage = greet;
  door::Greeting greeting{};
  std::array<uint8_t, 1 + door::kProofSize> verdict{};  // what `tell` writes
  std::size_t verdict_size = 0;
  std::size_t sent = 0;  // bytes written of the greeting or the verdict
  door::Answer answer{};  // the client's nonce and proof
  std::size_t got = 0;
};

int ms_until(Clock::time_point t) {
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(t - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(ms, 0, 60000));
}

} // namespace

struct FrontDoor::Impl {
  Options opts;
  door::Mode mode;
  int listener = -1;
  int ep = epoll_create1(EPOLL_CLOEXEC);
  int wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  Relay relay;
  std::atomic<std::size_t> pending_count{0};
  mutable std::mutex stats_mu;  // guards stats (read by other threads)
  Stats stats;
  // Owned by the door's thread.
  uint64_t next_id = 1;
  std::unordered_map<uint64_t, Guest> guests;
  std::deque<std::pair<Clock::time_point, uint64_t>> by_age;  // accept order is deadline order
  bool accepting = true;
  Clock::time_point resume_at{};
  Clock::time_point last_pause_warning{};
  std::thread thread;

  std::shared_ptr<TlsContext> sealing;  // sealed mode's TLS context

  explicit Impl(Options o)
      : opts(std::move(o)),
        mode(opts.certified ? (opts.secret.empty() ? door::Mode::certified : door::Mode::challenge_certified)
             : opts.secret.empty() ? door::Mode::open
             : opts.seal           ? door::Mode::sealed
                                   : door::Mode::challenge) {
    rlimit lim{};
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
      const std::size_t budget = FrontDoor::connection_budget(lim.rlim_cur);
      opts.max_connections = std::min(opts.max_connections, budget);
      if (budget < kWarnBelow)
        CHORUS_LOG(warn, orch, LogWhere{},
                   "front door: the file descriptor limit (" + std::to_string(lim.rlim_cur) + ") leaves room for " +
                       std::to_string(budget) + " connections at once; raise it (ulimit -n) for jobs of more nodes");
    }
    opts.max_connections = std::max<std::size_t>(opts.max_connections, 1);
    opts.max_pending = std::clamp<std::size_t>(opts.max_pending, 1, opts.max_connections);
  }

  void count(uint64_t Stats::*field) {
    std::lock_guard<std::mutex> lk(stats_mu);
    ++(stats.*field);
  }

  void watch(int fd, uint64_t tag, uint32_t events, int op) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = tag;
    epoll_ctl(ep, op, fd, &ev);
  }

  void run() {
    epoll_event evs[64];
    for (;;) {
      const int n = epoll_wait(ep, evs, 64, next_timeout());
      for (int i = 0; i < n; ++i) {
        const uint64_t d = evs[i].data.u64;
        if (d == kWakeTag) return close_everything();
        if (d == kListenTag) on_listener();
        else on_guest(d >> 1, (d & 1) != 0, evs[i].events);
      }
      expire();
      if (!accepting && Clock::now() >= resume_at) {
        accepting = true;
        watch(listener, kListenTag, EPOLLIN, EPOLL_CTL_ADD);
      }
    }
  }

  int next_timeout() {
    while (!by_age.empty() && !guests.count(by_age.front().second)) by_age.pop_front();
    int t = by_age.empty() ? -1 : ms_until(by_age.front().first);
    if (!accepting) t = t < 0 ? ms_until(resume_at) : std::min(t, ms_until(resume_at));
    return t;
  }

  void on_listener() {
    for (int k = 0; k < 64; ++k) {  // a bounded batch: handshakes in progress get their turn
      const int fd = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
        const bool starved = errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM;
        if (starved && evict_oldest()) continue;
        return pause(std::strerror(errno));
      }
      count(&Stats::accepted);
      const bool full =
          guests.size() >= opts.max_pending || guests.size() + relay.pairs() >= opts.max_connections;
      if (full && !evict_oldest()) {
        count(&Stats::refused);  // counted first: whoever sees the close may look at the stats
        ::close(fd);
        continue;
      }
      start(fd);
    }
  }

  // Stops accepting for kAcceptPause: the listener stays readable while nothing can be accepted,
  // and epoll would report it again at once, forever.
  void pause(const char* why) {
    accepting = false;
    resume_at = Clock::now() + kAcceptPause;
    epoll_ctl(ep, EPOLL_CTL_DEL, listener, nullptr);
    count(&Stats::paused);
    if (Clock::now() - last_pause_warning > std::chrono::seconds(10)) {
      last_pause_warning = Clock::now();
      CHORUS_LOG(warn, orch, LogWhere{},
                 std::string("front door: cannot accept (") + why + "), pausing for " +
                     std::to_string(kAcceptPause.count()) + " ms at a time");
    }
  }

  void start(int fd) {
    const uint64_t id = next_id++;
    Guest g;
    g.fd = fd;
    g.deadline = Clock::now() + opts.handshake_timeout;
    if (!door::make_greeting(mode, g.greeting)) {
      CHORUS_LOG(error, orch, LogWhere{}, "front door: no random nonce (RAND_bytes failed); connection closed");
      ::close(fd);
      return;
    }
    guests.emplace(id, g);
    by_age.emplace_back(g.deadline, id);
    pending_count = guests.size();
    watch(fd, id << 1, EPOLLOUT, EPOLL_CTL_ADD);
    advance(id);  // the greeting fits a fresh socket's buffer: usually written at once
  }

  bool evict_oldest() {
    while (!by_age.empty()) {
      const uint64_t id = by_age.front().second;
      by_age.pop_front();
      if (guests.count(id)) {
        count(&Stats::evicted);
        end(id);
        return true;
      }
    }
    return false;
  }

  void expire() {
    const auto now = Clock::now();
    while (!by_age.empty() && by_age.front().first <= now) {
      const uint64_t id = by_age.front().second;
      by_age.pop_front();
      if (!guests.count(id)) continue;
      CHORUS_LOG(trace, orch, LogWhere{},
                 "front door: " + peer_address(guests[id].fd) + " did not finish the handshake in time");
      count(&Stats::expired);
      end(id);
    }
  }

  // Forgets a handshake and closes its sockets (in that order: whoever sees the close may ask
  // pending()).
  void end(uint64_t id) {
    auto it = guests.find(id);
    const int fd = it->second.fd, inner = it->second.inner;
    guests.erase(it);
    pending_count = guests.size();
    ::close(fd);
    if (inner >= 0) ::close(inner);
  }

  void on_guest(uint64_t id, bool inner, uint32_t events) {
    auto it = guests.find(id);
    if (it == guests.end()) return;
    Guest& g = it->second;
    if (!inner && (events & (EPOLLERR | EPOLLHUP)) && g.stage != Guest::listen) {
      count(&Stats::abandoned);
      return end(id);
    }
    if (inner && g.stage == Guest::connect) {
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(g.inner, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0 || (events & EPOLLERR)) return inner_unreachable(id, err);
      return connected(id);
    }
    advance(id);
  }

  // Moves a handshake on as far as its socket allows.
  void advance(uint64_t id) {
    Guest& g = guests[id];
    if (g.stage == Guest::greet) {
      if (!write_some(id, g.greeting.data(), g.greeting.size())) return;
      if (g.sent < g.greeting.size()) return;
      if (!door::challenges(mode)) return connect_inner(id);
      g.stage = Guest::listen;
      watch(g.fd, id << 1, EPOLLIN, EPOLL_CTL_MOD);
    }
    if (g.stage == Guest::listen) {
      // Only the answer's 64 bytes are read: whatever follows waits in the socket for the relay,
      // and a stranger's bytes beyond them are never looked at.
      const ssize_t r = recv(g.fd, g.answer.data() + g.got, g.answer.size() - g.got, 0);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        count(&Stats::abandoned);
        return end(id);
      }
      if (r > 0) g.got += static_cast<std::size_t>(r);
      if (g.got < g.answer.size()) return;
      door::Proof expected{};
      if (door::make_proof(opts.secret, g.greeting, door::nonce_of(g.answer), door::Role::client, expected) &&
          door::same_proof(expected, door::proof_of(g.answer)))
        return connect_inner(id);
      CHORUS_LOG(info, orch, LogWhere{},
                 "front door: " + peer_address(g.fd) + " answered the challenge wrongly (wrong secret)");
      count(&Stats::rejected);
      g.verdict[0] = door::kRejected;
      g.verdict_size = 1;
      g.sent = 0;
      g.stage = Guest::tell;
      watch(g.fd, id << 1, EPOLLOUT, EPOLL_CTL_MOD);
    }
    if (g.stage == Guest::tell) {
      if (!write_some(id, g.verdict.data(), g.verdict_size)) return;
      if (g.sent < g.verdict_size) return;
      if (g.verdict[0] == door::kAccepted) return admit(id);
      end(id);
    }
  }

  // Writes from g.sent on; false when the handshake was ended (the client went away).
  bool write_some(uint64_t id, const uint8_t* data, std::size_t size) {
    Guest& g = guests[id];
    const ssize_t w = send(g.fd, data + g.sent, size - g.sent, MSG_NOSIGNAL);
    if (w >= 0) g.sent += static_cast<std::size_t>(w);
    else if (errno != EAGAIN && errno != EINTR) {
      count(&Stats::abandoned);
      end(id);
      return false;
    }
    return true;
  }

  void connect_inner(uint64_t id) {
    Guest& g = guests[id];
    g.stage = Guest::connect;
    if (opts.open_inner) {
      g.inner = opts.open_inner();
      if (g.inner < 0) return inner_unreachable(id, errno);
      return connected(id);
    }
    g.inner = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (g.inner < 0) return inner_unreachable(id, errno);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(opts.inner_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    // The client's socket is left with no events while the inner one connects: its hang-up or
    // error still ends the handshake.
    watch(g.fd, id << 1, 0, EPOLL_CTL_MOD);
    if (::connect(g.inner, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return connected(id);
    if (errno != EINPROGRESS) return inner_unreachable(id, errno);
    watch(g.inner, id << 1 | 1, EPOLLOUT, EPOLL_CTL_ADD);
  }

  void inner_unreachable(uint64_t id, int err) {
    const std::string inner =
        opts.open_inner ? "the orchestrator" : "the orchestrator's own port 127.0.0.1:" + std::to_string(opts.inner_port);
    CHORUS_LOG(warn, orch, LogWhere{}, "front door: cannot reach " + inner + " (" + std::strerror(err) + "); connection closed");
    end(id);
  }

  void connected(uint64_t id) {
    Guest& g = guests[id];
    if (!door::challenges(mode)) return admit(id);
    door::Proof mine{};
    if (!door::make_proof(opts.secret, g.greeting, door::nonce_of(g.answer), door::Role::server, mine)) return end(id);
    g.verdict[0] = door::kAccepted;
    std::copy(mine.begin(), mine.end(), g.verdict.begin() + 1);
    g.verdict_size = g.verdict.size();
    g.sent = 0;
    g.stage = Guest::tell;
    if (g.inner >= 0) epoll_ctl(ep, EPOLL_CTL_DEL, g.inner, nullptr);
    watch(g.fd, id << 1, EPOLLOUT, EPOLL_CTL_MOD);
    advance(id);
  }

  // The handshake is done: the relay owns both sockets from now on.
  // (Counted and forgotten first: whoever sees bytes relayed may look at the stats.)
  void admit(uint64_t id) {
    const int fd = guests[id].fd, inner = guests[id].inner;
    auto tls = start_tls(guests[id]);
    if (!tls) {
      CHORUS_LOG(error, orch, LogWhere{}, "front door: cannot start TLS with " + peer_address(fd) + ": " +
                                              tls.status().message() + "; connection closed");
      return end(id);
    }
    epoll_ctl(ep, EPOLL_CTL_DEL, fd, nullptr);
    epoll_ctl(ep, EPOLL_CTL_DEL, inner, nullptr);
    count(&Stats::admitted);
    guests.erase(id);
    pending_count = guests.size();
    std::unique_ptr<StreamGuard> guard;
    if (opts.make_guard)
      if (auto checks = opts.make_guard()) guard = std::make_unique<LoggedGuard>(std::move(checks), peer_address(fd), *this);
    relay.add(fd, inner, std::move(guard), std::move(*tls), opts.handshake_timeout);
  }

  // The door's side of the link's TLS, its handshake still to come (null: no TLS in this mode):
  // keyed by the secret and this guest's nonces when sealed, with the certificates when certified.
  Result<std::unique_ptr<TlsChannel>> start_tls(const Guest& g) {
    if (door::certified(mode)) return TlsChannel::begin(*opts.certified, true);
    if (mode != door::Mode::sealed) return std::unique_ptr<TlsChannel>();
    door::Proof key{};
    if (!door::make_psk(opts.secret, g.greeting, door::nonce_of(g.answer), key))
      return Status(Errc::internal, "OpenSSL could not derive the key");
    return TlsChannel::begin(*sealing, true, std::string(key.begin(), key.end()));
  }

  // A client's guard that logs its reason once, with the client's address, and counts it.
  struct LoggedGuard : StreamGuard {
    std::unique_ptr<StreamGuard> checks;
    std::string peer;
    Impl& door;
    LoggedGuard(std::unique_ptr<StreamGuard> c, std::string p, Impl& d) : checks(std::move(c)), peer(std::move(p)), door(d) {}
    std::string check(const char* data, std::size_t size) override {
      std::string why = checks->check(data, size);
      if (!why.empty()) {
        door.count(&Stats::blocked);  // counted first: whoever sees the close may look at the stats
        CHORUS_LOG(warn, orch, LogWhere{}, "front door: closed the connection of " + peer + ": " + why);
      }
      return why;
    }
    void observe(const char* data, std::size_t size) override { checks->observe(data, size); }
    void ended(bool by_guarded) override { checks->ended(by_guarded); }
  };

  void close_everything() {
    while (!guests.empty()) end(guests.begin()->first);
    ::close(listener);
  }
};

std::size_t FrontDoor::connection_budget(std::size_t fd_limit) {
  const std::size_t reserved = std::min(kReservedFds, fd_limit / 4);
  const std::size_t budget = fd_limit > reserved ? (fd_limit - reserved) / 3 : 0;
  return std::max(budget, kMinConnections);
}

Result<std::unique_ptr<FrontDoor>> FrontDoor::open(Options opts) {
  std::unique_ptr<FrontDoor> door(new FrontDoor);
  door->impl_ = std::make_unique<Impl>(std::move(opts));
  Impl& d = *door->impl_;
  if (d.ep < 0 || d.wake < 0) return Status(Errc::internal, std::string("front door: ") + std::strerror(errno));
  if (auto s = tcp_listen(d.opts.host, d.opts.port, d.listener, door->port_); !s) return s;
  ::listen(d.listener, SOMAXCONN);  // a burst of nodes (or a flood) waits in the kernel, not refused
  fcntl(d.listener, F_SETFL, fcntl(d.listener, F_GETFL) | O_NONBLOCK);
  // The first nonce seeds OpenSSL's generator (half a millisecond here): now rather than on the
  // first node's connection.
  door::Greeting warm{};
  if (door::challenges(d.mode) && !door::make_greeting(d.mode, warm))
    return Status(Errc::internal, "front door: OpenSSL's random generator does not work");
  if (d.mode == door::Mode::sealed) {
    auto ctx = TlsContext::psk();
    if (!ctx) return ctx.status();
    d.sealing = *ctx;
  }
  d.watch(d.wake, kWakeTag, EPOLLIN, EPOLL_CTL_ADD);
  d.watch(d.listener, kListenTag, EPOLLIN, EPOLL_CTL_ADD);
  d.thread = std::thread([&d] { d.run(); });
  return door;
}

FrontDoor::~FrontDoor() {
  if (!impl_) return;
  if (impl_->thread.joinable()) {
    uint64_t one = 1;
    (void)!write(impl_->wake, &one, sizeof one);
    impl_->thread.join();
  } else if (impl_->listener >= 0) {
    ::close(impl_->listener);
  }
  ::close(impl_->ep);
  ::close(impl_->wake);
}

FrontDoor::Stats FrontDoor::stats() const {
  std::lock_guard<std::mutex> lk(impl_->stats_mu);
  return impl_->stats;
}

std::size_t FrontDoor::pending() const { return impl_->pending_count.load(); }
std::size_t FrontDoor::relayed() const { return impl_->relay.pairs(); }

} // namespace chorus
