#include "transport/tcp/tcp_connection.hpp"

#include <system_error>

#include <linux/sockios.h>
#include <linux/tcp.h>  // tcp_info with tcpi_snd_wnd (glibc's netinet/tcp.h lacks it)
#include <netinet/in.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

namespace chorus {

namespace {
constexpr std::size_t kMaxPayload = std::size_t{1} << 40;  // larger is a garbled header
constexpr std::size_t kReadPiece = std::size_t{1} << 20;   // progress is reported at least this often
constexpr std::size_t kIn = std::size_t{64} << 10;         // small frames are read in batches this big
constexpr std::size_t kWakeBytes = std::size_t{256} << 10; // a payload's reader is woken per this much

// The contiguous bytes at offset `at` (< t.total()) of a ticket's preamble, header, prefix, payload.
std::size_t ticket_span(const SendTicket& t, std::size_t at, const char*& p) {
  const std::size_t pre = t.prefix.size();
  const char* base[] = {t.preamble.data(), reinterpret_cast<const char*>(&t.header), t.prefix.data(),
                        reinterpret_cast<const char*>(t.payload)};
  const std::size_t len[] = {t.preamble.size(), sizeof(FrameHeader), pre, t.header.bytes - pre};
  std::size_t i = 0;
  while (at >= len[i]) at -= len[i++];  // at < total: ends within the payload at the latest
  p = base[i] + at;
  return len[i] - at;
}
} // namespace

TcpConnection::TcpConnection(int fd, uint32_t node, FrameSink* sink, std::unique_ptr<TlsChannel> tls,
                             std::unique_ptr<ShmChannel> shm)
    : Connection(node), fd_(fd), sink_(sink), tls_(std::move(tls)), shm_(std::move(shm)), in_(new std::byte[kIn]), hole_(new std::byte[kIn]) {}

void TcpConnection::wake_writer() {
  bool started = true;
  std::call_once(writer_once_, [this, &started] {
    try {
      // Named so that profiles and debuggers tell the data plane's threads apart.
      writer_ = std::thread([this] {
        pthread_setname_np(pthread_self(), ("chorus-wr" + std::to_string(this->node())).c_str());
        writer_loop();
      });
    } catch (const std::system_error&) {
      started = false;  // out of threads: nobody could write what is queued
    }
  });
  if (!started) return kill();  // its tickets fail now, rather than wait out their ops' timeouts
  cv_.notify_one();
}

TcpConnection::~TcpConnection() {
  kill();
  if (writer_.joinable()) writer_.join();
  ::close(fd_);
}

bool TcpConnection::queue_locked(const std::shared_ptr<SendTicket>& t) {
  if (dead_.load() || stopping_) return false;
  queue_.push_back(t);
  return true;
}

void TcpConnection::queue(std::shared_ptr<SendTicket> t) {
  bool queued;
  {
    std::lock_guard<std::mutex> lk(mu_);
    queued = queue_locked(t);
  }
  if (!queued) t->done.set(2);
}

void TcpConnection::push() {
  std::unique_lock<std::mutex> lk(mu_);
  push_locked(lk);
}

std::shared_ptr<SendTicket> TcpConnection::send(std::shared_ptr<SendTicket> t) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!queue_locked(t)) {
    lk.unlock();
    t->done.set(2);
    return t;
  }
  push_locked(lk);
  return t;
}

void TcpConnection::push_locked(std::unique_lock<std::mutex>& lk) {
  constexpr std::size_t kInline = std::size_t{256} << 10;
  if (writing_ || queue_.empty()) return;  // whoever writes takes what is queued next
  if (queue_.front()->total() > kInline) {
    lk.unlock();
    wake_writer();
    return;
  }
  std::shared_ptr<SendTicket> t = std::move(queue_.front());
  queue_.pop_front();
  writing_ = true;
  current_ = t;
  lk.unlock();
  // The line is free and the frame small: write it from this thread (no writer wake-up), as far as
  // the socket takes it without blocking; the writer thread finishes what is left.
  const bool ok = write_ticket(*t, false);
  const bool whole = ok && t->written();
  bool wake;
  lk.lock();
  writing_ = false;
  current_.reset();
  // A remainder goes back in front (of what was queued meanwhile, a later epoch's frames
  // included); not onto a connection ended meanwhile, whose queue has been failed already.
  const bool ended = ok && !whole && stopping_;
  if (ok && !whole && !ended) queue_.push_front(t);
  wake = !queue_.empty();  // others queued behind us, or our own remainder
  lk.unlock();
  if (!ok) {
    t->done.set(2);
    kill();
  } else if (whole) {
    t->done.set(1);
  } else if (ended) {
    t->done.set(2);
  }
  if (wake) wake_writer();  // an idle writer is not woken (or started) for nothing
}

bool TcpConnection::write_ticket(SendTicket& t, bool wait) {
  if (shm_) return write_ticket_shm(t, wait);
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

bool TcpConnection::write_ticket_tls(SendTicket& t, bool wait) {
  // The same bytes as write_ticket, encrypted a piece at a time into t.staged; a piece's records
  // are all written before the next piece is encrypted, and what an inline send could not write
  // stays in the ticket for the writer thread.
  constexpr std::size_t kPiece = std::size_t{64} << 10;   // plaintext encrypted per lock
  constexpr std::size_t kRecord = std::size_t{16} << 10;  // TLS's largest record
  const std::size_t total = t.total();
  auto span = [&](std::size_t at, const char*& p) { return ticket_span(t, at, p); };
  for (;;) {
    while (t.staged_sent < t.staged.size()) {
      ssize_t r = ::send(fd_, t.staged.data() + t.staged_sent, t.staged.size() - t.staged_sent,
                       MSG_NOSIGNAL | (wait ? 0 : MSG_DONTWAIT));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && !wait && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (r <= 0) return false;
      t.staged_sent += static_cast<std::size_t>(r);
    }
    t.staged.clear();
    t.staged_sent = 0;
    if (t.sent == total) return true;
    const char* p = nullptr;
    std::size_t n = span(t.sent, p);
    std::string why;
    bool ok;
    if (n >= kRecord || t.sent + n == total) {
      n = std::min(n, kPiece);
      ok = tls_->encrypt(p, n, t.staged, why);
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
      ok = tls_->encrypt(gather, n, t.staged, why);
    }
    if (!ok) return false;
    t.sent += n;
  }
}

bool TcpConnection::write_ticket_shm(SendTicket& t, bool wait) {
  // The same bytes as write_ticket, copied into the ring and published once per frame (or every
  // kPublish bytes of a large one, so the reader starts early); when the ring is full an inline
  // send leaves the rest to the writer thread, which waits for the reader to make room.
  constexpr std::size_t kPublish = std::size_t{64} << 10;
  const std::size_t total = t.total();
  while (t.sent < total) {
    const char* p = nullptr;
    const std::size_t n = std::min(ticket_span(t, t.sent, p), kPublish);
    const std::size_t k = shm_->write_some(p, n);
    t.sent += k;
    if (shm_->unpublished() >= kPublish) shm_->publish();
    if (k < n) {
      shm_->publish();
      if (!wait) return true;
      if (!shm_->wait_for_room(Clock::now() + std::chrono::hours(24))) return false;
    }
  }
  shm_->publish();
  return true;
}

void TcpConnection::end_locked(bool reset, std::deque<std::shared_ptr<SendTicket>>& failed, bool silent) {
  // Disconnecting a TCP socket (connect to AF_UNSPEC) sends a reset: the other side reads an
  // error, not an end of stream. Once: a connection that is dead already stays as it is. A silent
  // end (drop_silently) touches neither the socket nor the rings: the other side hears nothing.
  if (!silent && reset && !dead_.load()) {
    if (shm_) shm_->mark_cut();
    sockaddr sa{};
    sa.sa_family = AF_UNSPEC;
    [[maybe_unused]] int r = ::connect(fd_, &sa, sizeof sa);
  }
  stopping_ = true;
  dead_.store(true);
  if (!silent && !shut_) {  // once, and also after a silent end, which left the socket open
    shut_ = true;
    shutdown(fd_, SHUT_RDWR);
  }
  if (!silent && shm_) shm_->close();
  failed.swap(queue_);
}

bool TcpConnection::end_if(std::optional<uint32_t> magic, bool reset, bool silent) {
  std::deque<std::shared_ptr<SendTicket>> failed;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (magic && *magic != this->magic()) return false;  // a later epoch's now (rehome, under mu_ too)
    end_locked(reset, failed, silent);
  }
  cv_.notify_all();
  for (auto& t : failed) t->done.set(2);
  return true;
}

void TcpConnection::drop_silently() { end_if(std::nullopt, false, true); }

void TcpConnection::kill() { end_if(std::nullopt, false); }

void TcpConnection::cut() { end_if(std::nullopt, true); }

bool TcpConnection::kill_if(uint32_t magic, bool reset) { return end_if(magic, reset); }

bool TcpConnection::abandon(const SendTicket& t) {
  std::deque<std::shared_ptr<SendTicket>> failed;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto at = std::find_if(queue_.begin(), queue_.end(), [&t](const auto& q) { return q.get() == &t; });
    if (at != queue_.end() && (*at)->sent == 0 && (*at)->staged.empty()) {  // not begun: it just goes
      failed.push_back(std::move(*at));
      queue_.erase(at);
    } else if (current_.get() == &t || at != queue_.end()) {
      if (stopping_) return true;  // ended already (a cut, a close): the writer lets go by itself
      end_locked(true, failed);
      abandoned_ = true;  // the reader tells its sink: nobody of the epoch it serves ended it
    } else {
      return false;
    }
  }
  cv_.notify_all();
  for (auto& f : failed) f->done.set(2);
  return true;
}

std::optional<std::chrono::milliseconds> TcpConnection::since_ack() const {
  if (shm_ || dead_.load()) return std::nullopt;  // a pair's socket beside its rings carries only wake-ups
  // Bytes the other side has not acknowledged: sent, or still queued (a path that drops packets
  // may keep them from leaving at all).
  int queued = 0;
  if (ioctl(fd_, SIOCOUTQ, &queued) != 0 || queued <= 0) return std::nullopt;
  tcp_info info{};
  socklen_t len = sizeof info;
  if (getsockopt(fd_, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return std::nullopt;
  if (len >= offsetof(tcp_info, tcpi_snd_wnd) + sizeof info.tcpi_snd_wnd && info.tcpi_snd_wnd == 0) return std::nullopt;
  return std::chrono::milliseconds(info.tcpi_last_ack_recv);
}

void TcpConnection::writer_loop() {
  for (;;) {
    std::shared_ptr<SendTicket> t;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return (!queue_.empty() && !writing_) || stopping_; });
      if (stopping_) return;
      t = queue_.front();
      queue_.pop_front();
      writing_ = true;
      current_ = t;
    }
    const bool ok = write_ticket(*t, true);
    {
      std::lock_guard<std::mutex> lk(mu_);
      writing_ = false;
      current_.reset();
    }
    t->done.set(ok ? 1 : 2);
    if (!ok) {
      kill();
      return;
    }
  }
}

ssize_t TcpConnection::read_some(std::byte* p, std::size_t n) {
  if (shm_) return shm_->read_some(p, n);
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

void TcpConnection::wake_at(std::size_t bytes) {
  if (tls_ || shm_ || bytes == lowat_) return;  // TLS or ring bytes are not the payload's bytes
  const int v = static_cast<int>(bytes);
  if (setsockopt(fd_, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof v) == 0) lowat_ = bytes;
}

Connection::Pumped TcpConnection::read_failed(ssize_t r, bool in_frame) {
  const std::string where = in_frame ? " in the middle of a frame" : "";
  // A read error (a reset, an abort, garbled ring or TLS bytes) is the link's failure; an end of
  // the stream is the other process's close.
  if (r < 0) return end_reading("the connection failed" + where + ": " + std::strerror(errno), true);
  return end_reading("the connection was closed" + where, false);
}

Connection::Pumped TcpConnection::end_reading(const std::string& reason, bool broke) {
  const std::string why = tls_error_.empty() ? reason : reason + " (TLS: " + tls_error_ + ")";
  ended_ = true;
  if (in_frame_ && dst_) sink_->frame_failed(node(), cur_);
  in_frame_ = false;
  bool ours, abandoned;
  {
    std::lock_guard<std::mutex> lk(mu_);
    ours = stopping_;
    abandoned = abandoned_;
  }
  if (abandoned)  // cut here, for the epoch this link serves: a broken link, not a lost node
    sink_->broken(node(), "the link was cut: an earlier membership epoch's op gave up on a frame it had begun on it");
  else if (!ours && (got_bye_.load() || !broke))
    sink_->closed(node(), got_bye_.load(), why);
  else if (!ours)
    sink_->broken(node(), why);
  kill();
  return Pumped::ended;
}

void TcpConnection::stop_reading() {
  if (ended_) return;
  ended_ = true;
  if (in_frame_ && dst_) sink_->frame_failed(node(), cur_);
  in_frame_ = false;
}

bool TcpConnection::rehome(uint32_t node, uint32_t magic, FrameSink* sink) {
  if (ended_) return false;
  const uint32_t was = this->node();
  std::deque<std::shared_ptr<SendTicket>> dropped;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (dead_.load() || stopping_) return false;
    // What the earlier epoch queued and did not begin goes (the other side would drop it, and its
    // op must not wait for it, nor its memory be read once that op has returned). A frame whose
    // bytes have begun cannot be taken back: it is written out ahead of the new epoch's frames
    // (the other side reads it as the earlier epoch's and drops it; its op waits for it, or
    // abandons it, which ends the link). One being written is not in the queue (its writer puts
    // back what it could not write, in front); one begun and put back is at the front. Only the
    // writer changes `sent` and `staged`, and only while writing_.
    std::shared_ptr<SendTicket> begun;
    if (!writing_ && !queue_.empty() && (queue_.front()->sent > 0 || !queue_.front()->staged.empty())) {
      begun = std::move(queue_.front());
      queue_.pop_front();
    }
    dropped.swap(queue_);
    if (begun) queue_.push_back(std::move(begun));
    set_home(node, magic);  // under mu_: the earlier epoch's kill_if() sees it before or after
  }
  for (auto& t : dropped) t->done.set(2);
  if (in_frame_ && dst_) {  // an earlier epoch's frame: its rest is dropped
    sink_->frame_failed(was, cur_);
    dst_ = nullptr;
  }
  sink_ = sink;
  parked_ = false;
  got_bye_ = false;  // an earlier epoch's goodbye says nothing of this one
  return true;
}

Connection::Pumped TcpConnection::pump(std::size_t budget) {
  if (ended_) return Pumped::ended;
  if (parked_) return Pumped::parked;
  try {
    return pump_some(budget);
  } catch (const std::exception& e) {  // e.g. no memory for a frame: this connection cannot go on
    return end_reading(std::string("reading failed: ") + e.what(), true);
  }
}

Connection::Pumped TcpConnection::pump_some(std::size_t budget) {
  // Small frames usually arrive together (an announcement, then its data): one recv takes them
  // all into in_; a large payload's remainder is read straight into its destination.
  std::size_t taken = 0;
  // A read that got less than it asked for emptied the socket: rather than a read that would only
  // say so, return (the poll is level-triggered, so anything that comes later is reported).
  bool drained = false;
  // Nothing more to read now: the next wake-up once `bytes` have arrived.
  auto waiting = [this](std::size_t bytes) {
    wake_at(bytes);
    return Pumped::idle;
  };
  for (;;) {
    if (!in_frame_) {
      if (end_ - pos_ < sizeof(FrameHeader)) {
        if (drained) return waiting(1);
        if (taken >= budget) return Pumped::more;  // only before a read: what is buffered is parsed
        if (pos_ > 0) {  // keep the partial header at the front
          std::memmove(in_.get(), in_.get() + pos_, end_ - pos_);
          end_ -= pos_;
          pos_ = 0;
        }
        // From a ring, only the header: the payload then goes straight to its destination (a
        // batch costs a system call per read on a socket, and only a copy on a ring).
        const std::size_t want = shm_ ? sizeof(FrameHeader) - end_ : kIn - end_;
        ssize_t r = read_some(in_.get() + end_, want);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return waiting(1);
        if (r <= 0) return read_failed(r, end_ > pos_);
        drained = static_cast<std::size_t>(r) < want;
        end_ += static_cast<std::size_t>(r);
        taken += static_cast<std::size_t>(r);
        continue;
      }
      std::memcpy(&cur_, in_.get() + pos_, sizeof cur_);
      if (!FrameHeader::ours(cur_.magic) || cur_.bytes > kMaxPayload)
        return end_reading("garbled frame on the data connection", true);
      // The other side is in the next epoch already: its frames wait, unread, for our next one.
      if (FrameHeader::later(cur_.magic, magic())) {
        parked_ = true;
        return Pumped::parked;
      }
      pos_ += sizeof cur_;
      // A frame of an earlier membership epoch (this connection was kept): read and dropped.
      const bool current = cur_.magic == magic();
      if (current && cur_.type == FrameType::bye) {
        got_bye_ = true;
        continue;
      }
      dst_ = current ? sink_->begin_frame(node(), cur_) : nullptr;
      in_frame_ = true;
      got_ = 0;
      // What is already buffered first.
      const std::size_t first = std::min<std::size_t>(cur_.bytes, end_ - pos_);
      if (first > 0) {
        if (dst_) std::memcpy(dst_, in_.get() + pos_, first);
        pos_ += first;
        got_ = first;
        if (dst_ && got_ < cur_.bytes) sink_->progress(node(), cur_, got_);
      }
    }
    if (got_ < cur_.bytes) {  // the rest from the socket, in pieces
      if (drained) return waiting(std::min(cur_.bytes - got_, kWakeBytes));
      if (taken >= budget) return Pumped::more;
      std::size_t want = std::min<std::size_t>(cur_.bytes - got_, kReadPiece);
      std::byte* at = dst_ ? dst_ + got_ : hole_.get();
      if (!dst_) want = std::min(want, kIn);
      ssize_t r = read_some(at, want);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return waiting(std::min(cur_.bytes - got_, kWakeBytes));
      if (r <= 0) return read_failed(r, true);
      drained = static_cast<std::size_t>(r) < want;
      got_ += static_cast<std::size_t>(r);
      taken += static_cast<std::size_t>(r);
      if (dst_ && got_ < cur_.bytes) sink_->progress(node(), cur_, got_);
      if (got_ < cur_.bytes) continue;
    }
    in_frame_ = false;
    if (dst_) sink_->progress(node(), cur_, got_);  // the whole frame (also for zero bytes)
  }
}

} // namespace chorus
