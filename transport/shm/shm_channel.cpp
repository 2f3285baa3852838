#include "transport/shm/shm_channel.hpp"

#include "core/futex.hpp"
#include "core/settings.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>


namespace chorus {

// One direction. Each word on a cache line of its own: the writer owns head, the reader tail.
struct ShmChannel::Ring {
  alignas(64) std::atomic<uint64_t> head{0};            // bytes written so far
  alignas(64) std::atomic<uint64_t> tail{0};            // bytes read so far
  alignas(64) std::atomic<uint32_t> reader_sleeps{0};   // 1: the reader waits in epoll for a byte
  alignas(64) std::atomic<uint32_t> writer_sleeps{0};   // 1: the writer waits on `room` for space
  std::atomic<uint32_t> room{0};                        // shared futex word, raised when space is freed
  std::atomic<uint32_t> cut{0};  // 1: the writer cut the connection off (mark_cut); it did not end
};

struct ShmChannel::Segment {
  static constexpr uint64_t kMagic = 0x43484f52534d3031;  // "CHORSM01"
  uint64_t magic;
  uint64_t collective;
  uint64_t token;
  uint64_t capacity;  // of each ring
  alignas(64) Ring to_joiner;   // the creator writes, the joiner reads
  alignas(64) Ring to_creator;  // the joiner writes, the creator reads
  // Then the bytes: to_joiner's, then to_creator's.
  static std::size_t bytes(std::size_t cap) { return sizeof(Segment) + 2 * cap; }
};

namespace {

static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "the rings' words must be lock-free to be shared between processes");

} // namespace

std::size_t ShmChannel::ring_bytes() {
  static const std::size_t bytes = static_cast<std::size_t>(tuned_number(SettingId::shm_ring_kib)) << 10;
  return bytes;
}

ShmChannel::ShmChannel(int fd, SharedSegment segment, std::size_t cap, bool creator)
    : fd_(fd), segment_(std::move(segment)), cap_(cap) {
  auto* seg = static_cast<Segment*>(segment_.base());
  std::byte* data = static_cast<std::byte*>(segment_.base()) + sizeof(Segment);
  out_ = creator ? &seg->to_joiner : &seg->to_creator;
  in_ = creator ? &seg->to_creator : &seg->to_joiner;
  out_data_ = creator ? data : data + cap_;
  in_data_ = creator ? data + cap_ : data;
}

ShmChannel::~ShmChannel() = default;

Result<std::unique_ptr<ShmChannel>> ShmChannel::offer(int fd, TlsChannel* tls, uint64_t collective, uint64_t token,
                                                       Clock::time_point deadline) {
  const std::size_t cap = ring_bytes();
  auto made = SharedSegment::make("chorus-shm", Segment::bytes(cap));
  if (!made.is_ok()) return Status(made.status().code(), "a data connection's " + made.status().message());
  SharedSegment segment = std::move(*made);
  auto* seg = new (segment.base()) Segment{};
  seg->collective = collective;
  seg->token = token;
  seg->capacity = cap;
  seg->magic = Segment::kMagic;
  bool attached = false;
  if (auto s = segment.offer(fd, tls, deadline, attached); !s.is_ok()) return s;
  if (!attached) return std::unique_ptr<ShmChannel>{};
  segment.forget_descriptor();  // attached: nobody else may open it through /proc any more
  return std::unique_ptr<ShmChannel>(new ShmChannel(fd, std::move(segment), cap, /*creator=*/true));
}

Result<std::unique_ptr<ShmChannel>> ShmChannel::accept(int fd, TlsChannel* tls, uint64_t collective, uint64_t token,
                                                        Clock::time_point deadline, std::string& why) {
  auto taken = SharedSegment::take_offer(fd, tls, std::size_t{1} << 34, deadline, why);
  if (!taken.is_ok()) return taken.status();
  SharedSegment segment = std::move(*taken);
  if (segment.mapped()) {
    const auto* seg = static_cast<const Segment*>(segment.base());
    if (segment.bytes() < sizeof(Segment) || seg->magic != Segment::kMagic || seg->collective != collective ||
        seg->token != token || Segment::bytes(seg->capacity) != segment.bytes()) {
      why = "the offered segment is not this collective's";
      segment = SharedSegment{};
    }
  }
  if (auto s = SharedSegment::answer(fd, tls, segment.mapped(), deadline); !s.is_ok()) return s;
  if (!segment.mapped()) return std::unique_ptr<ShmChannel>{};
  const std::size_t cap = static_cast<const Segment*>(segment.base())->capacity;
  return std::unique_ptr<ShmChannel>(new ShmChannel(fd, std::move(segment), cap, /*creator=*/false));
}

std::size_t ShmChannel::write_some(const void* p, std::size_t n) {
  const uint64_t tail = out_->tail.load(std::memory_order_acquire);
  if (tail > pending_ || pending_ - tail > cap_) {  // the reader wrote nonsense: never write past the ring
    close();
    return 0;
  }
  const std::size_t k = std::min<std::size_t>(n, cap_ - static_cast<std::size_t>(pending_ - tail));
  if (k == 0) return 0;
  const std::size_t at = static_cast<std::size_t>(pending_ % cap_), first = std::min(k, cap_ - at);
  std::memcpy(out_data_ + at, p, first);
  std::memcpy(out_data_, static_cast<const std::byte*>(p) + first, k - first);
  pending_ += k;
  return k;
}

std::size_t ShmChannel::unpublished() const {
  return static_cast<std::size_t>(pending_ - out_->head.load(std::memory_order_relaxed));
}

void ShmChannel::publish() {
  if (out_->head.load(std::memory_order_relaxed) == pending_) return;
  // seq_cst store, then seq_cst load of the reader's flag: either it sees these bytes after
  // saying it sleeps, or we see that it sleeps and wake it.
  out_->head.store(pending_, std::memory_order_seq_cst);
  if (out_->reader_sleeps.load(std::memory_order_seq_cst) != 0 && out_->reader_sleeps.exchange(0) != 0) {
    const char wake = 'w';
    [[maybe_unused]] ssize_t r = ::send(fd_, &wake, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
}

void ShmChannel::mark_cut() { out_->cut.store(1, std::memory_order_seq_cst); }

void ShmChannel::close() {
  closed_.store(true);
  out_->room.fetch_add(1, std::memory_order_seq_cst);  // a writer waiting for room lets go at once
  futex::wake(&out_->room, 1, futex::Scope::shared);
}

bool ShmChannel::wait_for_room(Clock::time_point until) {
  constexpr auto kSlice = std::chrono::milliseconds(10);  // a kill is noticed within this
  while (!closed_.load()) {
    const uint32_t seen = out_->room.load(std::memory_order_seq_cst);
    out_->writer_sleeps.store(1, std::memory_order_seq_cst);
    if (pending_ - out_->tail.load(std::memory_order_seq_cst) < cap_) return true;
    const auto now = Clock::now();
    if (now >= until) return false;
    futex::wait(&out_->room, seen, std::min<Clock::duration>(until - now, kSlice), futex::Scope::shared);
  }
  return false;
}

bool ShmChannel::has_bytes() const {
  return in_->head.load(std::memory_order_acquire) != in_->tail.load(std::memory_order_relaxed);
}

bool ShmChannel::arm() {
  // seq_cst both ways with publish(): either the writer sees the flag, or we see its bytes.
  armed_ = true;  // from now on a wake byte may come: the next empty read takes it off the socket
  in_->reader_sleeps.store(1, std::memory_order_seq_cst);
  if (in_->head.load(std::memory_order_seq_cst) == in_->tail.load(std::memory_order_relaxed)) return true;
  in_->reader_sleeps.store(0, std::memory_order_relaxed);
  return false;
}

void ShmChannel::disarm() { in_->reader_sleeps.store(0, std::memory_order_relaxed); }

long ShmChannel::read_some(void* p, std::size_t n) {
  std::size_t got = 0;
  for (;;) {
    const uint64_t tail = in_->tail.load(std::memory_order_relaxed);
    const uint64_t head = in_->head.load(std::memory_order_acquire);
    if (head < tail || head - tail > cap_) {  // the writer wrote nonsense: never read past the ring
      errno = EPROTO;
      return -1;
    }
    const std::size_t k = std::min<std::size_t>(n - got, static_cast<std::size_t>(head - tail));
    if (k > 0) {
      std::byte* to = static_cast<std::byte*>(p) + got;
      const std::size_t at = static_cast<std::size_t>(tail % cap_), first = std::min(k, cap_ - at);
      std::memcpy(to, in_data_ + at, first);
      std::memcpy(to + first, in_data_, k - first);
      in_->tail.store(tail + k, std::memory_order_seq_cst);
      if (in_->writer_sleeps.load(std::memory_order_seq_cst) != 0 && in_->writer_sleeps.exchange(0) != 0) {
        in_->room.fetch_add(1, std::memory_order_seq_cst);
        futex::wake(&in_->room, 1, futex::Scope::shared);
      }
      got += k;
      if (got == n) return static_cast<long>(got);
      continue;
    }
    // The ring is empty. With nothing read yet, and only when we asked for a wake-up since the
    // last look (the poller arms every ring before it sleeps, so an ended socket is seen too) or
    // were killed: take the wake-up bytes off the socket, whose end is the other process's end
    // (after the bytes it wrote before it, hence the second look), or ours.
    if (got == 0 && (armed_ || closed_.load())) {
      if (peer_gone_) {
        if (in_->cut.load(std::memory_order_seq_cst) == 0) return 0;
        errno = ECONNRESET;  // cut off by the other side, which lives: a broken link, not an end
        return -1;
      }
      char drain[64];
      const ssize_t r = ::recv(fd_, drain, sizeof drain, MSG_DONTWAIT);
      if (r > 0 || (r < 0 && errno == EINTR)) continue;
      if (r == 0 || (r < 0 && (errno == ECONNRESET || errno == EPIPE))) {
        peer_gone_ = true;
        continue;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      armed_ = false;  // drained: nothing more is owed until the next arm
    }
    if (got > 0) return static_cast<long>(got);
    errno = EAGAIN;
    return -1;
  }
}

} // namespace chorus
