#include "transport/connection.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace chorus {

namespace {

constexpr std::size_t kMaxPayload = std::size_t{1} << 40;  // larger is a garbled header
constexpr std::size_t kReadPiece = std::size_t{1} << 20;   // progress is reported at least this often
constexpr std::size_t kIn = std::size_t{64} << 10;         // small frames are read in batches this big

std::string err_text(int e) { return std::strerror(e); }

int remaining_ms(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms < 0 ? 0 : static_cast<int>(std::min<long long>(ms, 1000));
}

void tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // small control frames go at once
}

} // namespace

bool split_host_port(const std::string& addr, std::string& host, uint16_t& port) {
  auto colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == addr.size()) return false;
  host = addr.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  try {
    std::size_t used = 0;
    unsigned long p = std::stoul(addr.substr(colon + 1), &used);
    if (used != addr.size() - colon - 1 || p > 65535) return false;
    port = static_cast<uint16_t>(p);
  } catch (...) {
    return false;
  }
  return true;
}

Status tcp_listen(const std::string& host, uint16_t port, int& fd, uint16_t& bound) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  const std::string where = host + ":" + std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
    return {Errc::invalid_argument, "cannot resolve " + where + ": " + gai_strerror(rc)};
  Status st(Errc::unreachable, "cannot listen on " + where);
  fd = -1;
  for (addrinfo* a = res; a; a = a->ai_next) {
    int s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (s < 0) continue;
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(s, a->ai_addr, a->ai_addrlen) == 0 && listen(s, 64) == 0) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      getsockname(s, reinterpret_cast<sockaddr*>(&ss), &len);
      bound = ntohs(ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                            : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
      fd = s;
      st = Status::ok();
      break;
    }
    st = Status(Errc::unreachable, "cannot listen on " + where + ": " + err_text(errno));
    ::close(s);
  }
  freeaddrinfo(res);
  return st;
}

Status tcp_accept(int listen_fd, Clock::time_point deadline, int& fd) {
  fd = -1;
  while (Clock::now() < deadline) {
    pollfd p{listen_fd, POLLIN, 0};
    int rc = poll(&p, 1, remaining_ms(deadline));
    if (rc < 0 && errno != EINTR) return {Errc::internal, "poll on the data listener: " + err_text(errno)};
    if (rc <= 0) continue;
    int s = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (s < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      return {Errc::internal, "accept on the data listener: " + err_text(errno)};
    }
    tune(s);
    fd = s;
    return Status::ok();
  }
  return {Errc::timeout, "no connection arrived in time"};
}

Status tcp_connect(const std::string& host, uint16_t port, Clock::time_point deadline, int& fd) {
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
    return {Errc::unreachable, "cannot resolve " + where + ": " + gai_strerror(rc)};
  std::string last = "no address";
  fd = -1;
  do {
    for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
      int s = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
      if (s < 0) continue;
      int rc = connect(s, a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        pollfd p{s, POLLOUT, 0};
        while ((rc = poll(&p, 1, remaining_ms(deadline))) == 0 && Clock::now() < deadline) {
        }
        int soerr = rc > 0 ? 0 : ETIMEDOUT;
        socklen_t len = sizeof soerr;
        if (rc > 0) getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &len);
        rc = soerr == 0 ? 0 : -1;
        errno = soerr;
      }
      if (rc == 0) {
        fcntl(s, F_SETFL, fcntl(s, F_GETFL) & ~O_NONBLOCK);
        tune(s);
        fd = s;
      } else {
        last = err_text(errno);
        ::close(s);
      }
    }
    if (fd < 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (fd < 0 && Clock::now() < deadline);
  freeaddrinfo(res);
  if (fd < 0) return {Errc::unreachable, "cannot connect to " + where + " in time: " + last};
  return Status::ok();
}

namespace {
template <class Op>
Status exact(int fd, std::size_t n, Clock::time_point deadline, short events, Op op, const char* what) {
  std::size_t done = 0;
  while (done < n) {
    pollfd p{fd, events, 0};
    int rc = poll(&p, 1, remaining_ms(deadline));
    if (rc < 0 && errno != EINTR) return {Errc::unreachable, std::string(what) + ": " + err_text(errno)};
    if (rc == 0 && Clock::now() >= deadline) return {Errc::timeout, std::string(what) + " timed out"};
    if (rc <= 0) continue;
    ssize_t r = op(done);
    if (r == 0) return {Errc::unreachable, std::string(what) + ": the connection was closed"};
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return {Errc::unreachable, std::string(what) + ": " + err_text(errno)};
    }
    done += static_cast<std::size_t>(r);
  }
  return Status::ok();
}
} // namespace

Status read_exact(int fd, void* p, std::size_t n, Clock::time_point deadline) {
  auto* b = static_cast<char*>(p);
  return exact(fd, n, deadline, POLLIN, [&](std::size_t d) { return recv(fd, b + d, n - d, MSG_DONTWAIT); },
               "handshake read");
}

Status write_exact(int fd, const void* p, std::size_t n, Clock::time_point deadline) {
  auto* b = static_cast<const char*>(p);
  return exact(fd, n, deadline, POLLOUT,
               [&](std::size_t d) { return send(fd, b + d, n - d, MSG_DONTWAIT | MSG_NOSIGNAL); },
               "handshake write");
}

// ---- Connection ----

Connection::Connection(int fd, uint32_t node, FrameSink* sink, std::unique_ptr<TlsChannel> tls)
    : fd_(fd), node_(node), sink_(sink), tls_(std::move(tls)), in_(kIn), hole_(kIn) {
  // Named so that profiles and debuggers tell the data plane's threads apart.
  writer_ = std::thread([this] {
    pthread_setname_np(pthread_self(), ("chorus-wr" + std::to_string(node_)).c_str());
    writer_loop();
  });
}

Connection::~Connection() {
  kill();
  if (writer_.joinable()) writer_.join();
  ::close(fd_);
}

std::shared_ptr<SendTicket> Connection::post(FrameHeader h, const std::byte* payload) {
  auto t = std::make_shared<SendTicket>();
  t->header = h;
  t->payload = payload;
  return enqueue(std::move(t));
}

std::shared_ptr<SendTicket> Connection::post_prefixed(FrameHeader h, std::string prefix, const std::byte* payload,
                                                      std::size_t payload_bytes) {
  auto t = std::make_shared<SendTicket>();
  t->prefix = std::move(prefix);
  h.bytes = t->prefix.size() + payload_bytes;
  t->header = h;
  t->payload = payload;
  return enqueue(std::move(t));
}

std::shared_ptr<SendTicket> Connection::post_after(std::string preamble, FrameHeader h, const std::byte* payload) {
  auto t = std::make_shared<SendTicket>();
  t->preamble = std::move(preamble);
  t->header = h;
  t->payload = payload;
  return enqueue(std::move(t));
}

std::shared_ptr<SendTicket> Connection::post_frames(std::string frames) {
  // The last frame is the ticket's own; those before it its preamble.
  std::size_t at = 0, last = 0;
  FrameHeader h;
  while (at + sizeof h <= frames.size()) {
    std::memcpy(&h, frames.data() + at, sizeof h);
    last = at;
    at += sizeof h + h.bytes;
  }
  auto t = std::make_shared<SendTicket>();
  std::memcpy(&t->header, frames.data() + last, sizeof h);
  t->owned = frames.substr(last + sizeof h);
  t->payload = reinterpret_cast<const std::byte*>(t->owned.data());
  frames.resize(last);
  t->preamble = std::move(frames);
  return enqueue(std::move(t));
}

std::shared_ptr<SendTicket> Connection::post_owned(FrameHeader h, std::string payload) {
  auto t = std::make_shared<SendTicket>();
  t->owned = std::move(payload);
  h.bytes = t->owned.size();
  t->header = h;
  t->payload = reinterpret_cast<const std::byte*>(t->owned.data());
  return enqueue(std::move(t));
}

std::shared_ptr<SendTicket> Connection::enqueue(std::shared_ptr<SendTicket> t) {
  constexpr std::size_t kInline = std::size_t{256} << 10;
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (dead_.load() || stopping_) {
      t->done.set(2);
      return t;
    }
    if (writing_ || !queue_.empty() || t->total() > kInline) {
      queue_.push_back(t);
      lk.unlock();
      cv_.notify_one();
      return t;
    }
    writing_ = true;
  }
  // The line is free and the frame small: write it from this thread (no writer wake-up), as far as
  // the socket takes it without blocking; the writer thread finishes what is left.
  const bool ok = write_ticket(*t, false);
  const bool whole = ok && t->written();
  bool wake;
  {
    std::lock_guard<std::mutex> lk(mu_);
    writing_ = false;
    if (ok && !whole) queue_.push_front(t);
    wake = !queue_.empty();  // others queued behind us, or our own remainder
  }
  if (!ok) {
    t->done.set(2);
    kill();
  } else if (whole) {
    t->done.set(1);
  }
  if (wake) cv_.notify_one();  // an idle writer is not woken for nothing
  return t;
}

bool Connection::write_ticket(SendTicket& t, bool wait) {
  if (tls_) return write_ticket_tls(t, wait);
  // On the wire: the preamble (whole frames), the header, the prefix (if any), the payload.
  const std::size_t amble = t.preamble.size(), pre = t.prefix.size();
  const std::size_t body = t.header.bytes - pre;
  const std::size_t total = t.total();
  while (t.sent < total) {
    iovec iov[4];
    int cnt = 0;
    std::size_t at = t.sent;
    if (at < amble) {
      iov[cnt++] = {t.preamble.data() + at, amble - at};
      at = amble;
    }
    at -= amble;  // into header + prefix + payload
    if (at < sizeof(FrameHeader)) {
      iov[cnt++] = {reinterpret_cast<char*>(&t.header) + at, sizeof(FrameHeader) - at};
      at = sizeof(FrameHeader);
    }
    std::size_t off = at - sizeof(FrameHeader);  // into prefix + payload
    if (off < pre) {
      iov[cnt++] = {t.prefix.data() + off, pre - off};
      off = pre;
    }
    if (off - pre < body) iov[cnt++] = {const_cast<std::byte*>(t.payload) + (off - pre), body - (off - pre)};
    msghdr mh{};
    mh.msg_iov = iov;
    mh.msg_iovlen = static_cast<std::size_t>(cnt);
    ssize_t r = sendmsg(fd_, &mh, MSG_NOSIGNAL | (wait ? 0 : MSG_DONTWAIT));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && !wait && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (r <= 0) return false;
    t.sent += static_cast<std::size_t>(r);
  }
  return true;
}

bool Connection::write_ticket_tls(SendTicket& t, bool wait) {
  // The same bytes as write_ticket, encrypted a piece at a time into t.cipher; a piece's records
  // are all written before the next piece is encrypted, and what an inline send could not write
  // stays in the ticket for the writer thread.
  constexpr std::size_t kPiece = std::size_t{64} << 10;   // plaintext encrypted per lock
  constexpr std::size_t kRecord = std::size_t{16} << 10;  // TLS's largest record
  const std::size_t amble = t.preamble.size(), pre = t.prefix.size();
  const std::size_t total = t.total();
  // The contiguous plaintext at offset `at` of preamble, header, prefix, payload.
  auto span = [&](std::size_t at, const char*& p) -> std::size_t {
    const char* base[] = {t.preamble.data(), reinterpret_cast<const char*>(&t.header), t.prefix.data(),
                          reinterpret_cast<const char*>(t.payload)};
    const std::size_t len[] = {amble, sizeof(FrameHeader), pre, t.header.bytes - pre};
    std::size_t i = 0;
    while (at >= len[i]) at -= len[i++];  // at < total: ends within the payload at the latest
    p = base[i] + at;
    return len[i] - at;
  };
  for (;;) {
    while (t.cipher_sent < t.cipher.size()) {
      ssize_t r = send(fd_, t.cipher.data() + t.cipher_sent, t.cipher.size() - t.cipher_sent,
                       MSG_NOSIGNAL | (wait ? 0 : MSG_DONTWAIT));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && !wait && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (r <= 0) return false;
      t.cipher_sent += static_cast<std::size_t>(r);
    }
    t.cipher.clear();
    t.cipher_sent = 0;
    if (t.sent == total) return true;
    const char* p = nullptr;
    std::size_t n = span(t.sent, p);
    std::string why;
    bool ok;
    if (n >= kRecord || t.sent + n == total) {
      n = std::min(n, kPiece);
      ok = tls_->encrypt(p, n, t.cipher, why);
    } else {
      // Small parts (the header, a prefix, a preamble) go with the start of what follows, so a
      // small frame is one record rather than one per part.
      char gather[kRecord];
      n = 0;
      for (std::size_t at = t.sent; n < kRecord && at < total;) {
        std::size_t k = std::min(span(at, p), kRecord - n);
        std::memcpy(gather + n, p, k);
        n += k;
        at += k;
      }
      ok = tls_->encrypt(gather, n, t.cipher, why);
    }
    if (!ok) return false;
    t.sent += n;
  }
}

void Connection::close(std::chrono::milliseconds drain) {
  FrameHeader bye;
  bye.type = FrameType::bye;
  auto t = post_owned(bye, {});
  t->done.wait_at_least(1, Clock::now() + drain);
  kill();
}

void Connection::kill() {
  std::deque<std::shared_ptr<SendTicket>> failed;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
    if (!dead_.exchange(true)) shutdown(fd_, SHUT_RDWR);
    failed.swap(queue_);
  }
  cv_.notify_all();
  for (auto& t : failed) t->done.set(2);
}

void Connection::writer_loop() {
  for (;;) {
    std::shared_ptr<SendTicket> t;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return (!queue_.empty() && !writing_) || stopping_; });
      if (stopping_) return;
      t = queue_.front();
      queue_.pop_front();
      writing_ = true;
    }
    const bool ok = write_ticket(*t, true);
    {
      std::lock_guard<std::mutex> lk(mu_);
      writing_ = false;
    }
    t->done.set(ok ? 1 : 2);
    if (!ok) {
      kill();
      return;
    }
  }
}

ssize_t Connection::read_some(std::byte* p, std::size_t n) {
  if (!tls_) return recv(fd_, p, n, MSG_DONTWAIT);
  // Under TLS: the plaintext of every whole record that has arrived, decrypted straight into p.
  // Returns short only when the socket has nothing more, so epoll (on the socket) still tells
  // when to come back: no decryptable record is left waiting inside the channel.
  std::size_t total = 0;
  for (;;) {
    const long got = tls_->decrypt(p + total, n - total, tls_error_);
    if (got < 0) {
      errno = EPROTO;
      return -1;
    }
    total += static_cast<std::size_t>(got);
    if (total == n) return static_cast<ssize_t>(total);
    std::size_t room = 0;
    char* at = tls_->input(room);
    const ssize_t r = recv(fd_, at, room, MSG_DONTWAIT);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return total ? static_cast<ssize_t>(total) : r;
    tls_->received(static_cast<std::size_t>(r));
  }
}

Connection::Pumped Connection::end_reading(const std::string& reason) {
  const std::string why = tls_error_.empty() ? reason : reason + " (TLS: " + tls_error_ + ")";
  ended_ = true;
  if (in_frame_ && dst_) sink_->frame_failed(node_, cur_);
  in_frame_ = false;
  bool ours;
  {
    std::lock_guard<std::mutex> lk(mu_);
    ours = stopping_;
  }
  if (!ours) sink_->closed(node_, got_bye_.load(), why);
  kill();
  return Pumped::ended;
}

void Connection::stop_reading() {
  if (ended_) return;
  ended_ = true;
  if (in_frame_ && dst_) sink_->frame_failed(node_, cur_);
  in_frame_ = false;
}

Connection::Pumped Connection::pump(std::size_t budget) {
  if (ended_) return Pumped::ended;
  try {
    return pump_some(budget);
  } catch (const std::exception& e) {  // e.g. no memory for a frame: this connection cannot go on
    return end_reading(std::string("reading failed: ") + e.what());
  }
}

Connection::Pumped Connection::pump_some(std::size_t budget) {
  // Small frames usually arrive together (an announcement, then its data): one recv takes them
  // all into in_; a large payload's remainder is read straight into its destination.
  std::size_t taken = 0;
  // A read that got less than it asked for emptied the socket: rather than a read that would only
  // say so, return (the poll is level-triggered, so anything that comes later is reported).
  bool drained = false;
  for (;;) {
    if (!in_frame_) {
      if (end_ - pos_ < sizeof(FrameHeader)) {
        if (drained) return Pumped::idle;
        if (taken >= budget) return Pumped::more;  // only before a read: what is buffered is parsed
        if (pos_ > 0) {  // keep the partial header at the front
          std::memmove(in_.data(), in_.data() + pos_, end_ - pos_);
          end_ -= pos_;
          pos_ = 0;
        }
        ssize_t r = read_some(in_.data() + end_, kIn - end_);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Pumped::idle;
        if (r <= 0) return end_reading(end_ > pos_ ? "the connection was closed in the middle of a frame"
                                                  : "the connection was closed");
        drained = static_cast<std::size_t>(r) < kIn - end_;
        end_ += static_cast<std::size_t>(r);
        taken += static_cast<std::size_t>(r);
        continue;
      }
      std::memcpy(&cur_, in_.data() + pos_, sizeof cur_);
      pos_ += sizeof cur_;
      if (cur_.magic != FrameHeader::kMagic || cur_.bytes > kMaxPayload)
        return end_reading("garbled frame on the data connection");
      if (cur_.type == FrameType::bye) {
        got_bye_ = true;
        continue;
      }
      dst_ = sink_->begin_frame(node_, cur_);
      in_frame_ = true;
      got_ = 0;
      // What is already buffered first.
      const std::size_t first = std::min<std::size_t>(cur_.bytes, end_ - pos_);
      if (first > 0) {
        if (dst_) std::memcpy(dst_, in_.data() + pos_, first);
        pos_ += first;
        got_ = first;
        if (dst_ && got_ < cur_.bytes) sink_->progress(node_, cur_, got_);
      }
    }
    if (got_ < cur_.bytes) {  // the rest from the socket, in pieces
      if (drained) return Pumped::idle;
      if (taken >= budget) return Pumped::more;
      std::size_t want = std::min<std::size_t>(cur_.bytes - got_, kReadPiece);
      std::byte* at = dst_ ? dst_ + got_ : hole_.data();
      if (!dst_) want = std::min(want, hole_.size());
      ssize_t r = read_some(at, want);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Pumped::idle;
      if (r <= 0) return end_reading("the connection was closed in the middle of a frame");
      drained = static_cast<std::size_t>(r) < want;
      got_ += static_cast<std::size_t>(r);
      taken += static_cast<std::size_t>(r);
      if (dst_ && got_ < cur_.bytes) sink_->progress(node_, cur_, got_);
      if (got_ < cur_.bytes) continue;
    }
    in_frame_ = false;
    if (dst_) sink_->progress(node_, cur_, got_);  // the whole frame (also for zero bytes)
  }
}

} // namespace chorus
