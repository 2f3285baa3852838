#include "strategies/arena.hpp"

#include "core/futex.hpp"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <new>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CHORUS_ARENA_PAUSE() _mm_pause()
#else
#define CHORUS_ARENA_PAUSE() std::this_thread::yield()
#endif

namespace chorus {

namespace {
constexpr uint32_t kForming = 0, kOpen = 1, kClosed = 2;
constexpr std::size_t kLine = 64;
std::size_t round_up(std::size_t b) { return (b + kLine - 1) / kLine * kLine; }
} // namespace

// Written once by the arena's maker, then only the atomic words change. Each word that several
// peers write has a cache line of its own.
struct Arena::Control {
  uint64_t magic;
  uint64_t tag;
  uint64_t peers;
  uint64_t slot_bytes;
  uint64_t bytes;
  alignas(kLine) std::atomic<uint32_t> state{kForming};
  alignas(kLine) std::atomic<uint32_t> sleepers{0};  // peers asleep on `bell`
  // Rung after a verdict, a conclusion or a close, for sleepers: a shared futex word (not private),
  // since across processes it lives in a segment several map.
  alignas(kLine) std::atomic<uint32_t> bell{0};
  struct alignas(kLine) Word {
    std::atomic<uint64_t> v{0};  // (seq + 1) << 1 | go, for the latest op that used this word
  };
  Word verdict[kVerdicts];
  Word done[kVerdicts];  // (seq + 1) << 16 | the Errc its lead concluded op seq with (GPU ops)
};

// One peer's call for one op; written by that peer only, read by all once seq1 says it is there.
// The call is kept in atomic words: a peer frozen past the others' timeout may still read it while
// its owner writes a later op's (what it read is then discarded, see still_holds), and that must
// not be a data race.
struct alignas(kLine) Arena::Post {
  static constexpr int kWords = 7;
  std::atomic<uint64_t> seq1{0};  // the op's sequence number + 1, once posted
  std::atomic<uint64_t> call[kWords];

  void store(const ArenaCall& c) {
    const uint64_t w[kWords] = {
        uint64_t{static_cast<uint8_t>(c.kind)} | uint64_t{static_cast<uint8_t>(c.dtype)} << 8 |
            uint64_t{static_cast<uint8_t>(c.redop)} << 16 | uint64_t{c.fits} << 24 | uint64_t{c.root} << 32,
        c.count, uint64_t{c.ndim} | uint64_t{c.place} << 32, static_cast<uint64_t>(c.dims[0]), static_cast<uint64_t>(c.dims[1]),
        static_cast<uint64_t>(c.dims[2]), static_cast<uint64_t>(c.dims[3])};
    for (int i = 0; i < kWords; ++i) call[i].store(w[i], std::memory_order_relaxed);
  }
  ArenaCall load() const {
    uint64_t w[kWords];
    for (int i = 0; i < kWords; ++i) w[i] = call[i].load(std::memory_order_relaxed);
    ArenaCall c;
    c.kind = static_cast<OpKind>(w[0] & 0xff);
    c.dtype = static_cast<DType>((w[0] >> 8) & 0xff);
    c.redop = static_cast<ReduceOp>((w[0] >> 16) & 0xff);
    c.fits = (w[0] >> 24) & 1;
    c.root = static_cast<uint32_t>(w[0] >> 32);
    c.count = w[1];
    c.ndim = static_cast<uint32_t>(w[2]);
    c.place = static_cast<uint32_t>(w[2] >> 32);
    for (int d = 0; d < 4; ++d) c.dims[d] = static_cast<int64_t>(w[3 + d]);
    return c;
  }
};

static_assert(sizeof(Arena::Post) == kLine, "a post fills one cache line");
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "the arena's words must be lock-free to be shared between processes");

std::size_t Arena::region_bytes(uint32_t peers, std::size_t slot_bytes) {
  return round_up(sizeof(Control)) + std::size_t{peers} * 2 * (sizeof(Post) + round_up(slot_bytes));
}

Arena Arena::create(void* region, uint32_t peers, std::size_t slot_bytes, uint64_t tag) {
  auto* ctl = new (region) Control{};
  ctl->magic = kMagic;
  ctl->tag = tag;
  ctl->peers = peers;
  ctl->slot_bytes = round_up(slot_bytes);
  ctl->bytes = region_bytes(peers, slot_bytes);
  auto* base = static_cast<std::byte*>(region) + round_up(sizeof(Control));
  for (std::size_t i = 0; i < std::size_t{peers} * 2; ++i) new (base + i * sizeof(Post)) Post{};
  return Arena(ctl, base);
}

Arena Arena::attach(void* region, std::size_t bytes, uint64_t tag, std::string& why) {
  if (bytes < sizeof(Control)) {
    why = "the arena's region is too small (" + std::to_string(bytes) + " bytes)";
    return {};
  }
  auto* ctl = static_cast<Control*>(region);
  if (ctl->magic != kMagic || ctl->tag != tag) {
    why = "the region is not this job's arena";
    return {};
  }
  if (ctl->peers == 0 || ctl->peers > (1u << 16) || ctl->slot_bytes % kLine != 0 || ctl->slot_bytes > (1u << 30) ||
      ctl->bytes != bytes || region_bytes(static_cast<uint32_t>(ctl->peers), ctl->slot_bytes) != bytes) {
    why = "the arena's layout does not match its size";
    return {};
  }
  return Arena(ctl, static_cast<std::byte*>(region) + round_up(sizeof(Control)));
}

uint32_t Arena::peers() const { return static_cast<uint32_t>(ctl_->peers); }
std::size_t Arena::slot_bytes() const { return ctl_->slot_bytes; }

void Arena::open() {
  uint32_t forming = kForming;
  ctl_->state.compare_exchange_strong(forming, kOpen);
}

void Arena::close() {
  ctl_->state.store(kClosed, std::memory_order_seq_cst);
  ctl_->bell.fetch_add(1, std::memory_order_seq_cst);
  futex::wake(&ctl_->bell, futex::kAll, futex::Scope::shared);
}

bool Arena::usable() const { return valid() && ctl_->state.load(std::memory_order_acquire) != kClosed; }

Arena::Post& Arena::post(uint32_t r, uint64_t seq) const {
  return reinterpret_cast<Post*>(base_)[std::size_t{r} * 2 + (seq & 1)];
}

std::byte* Arena::slot(uint32_t r, uint64_t seq) const {
  const std::size_t posts = static_cast<std::size_t>(ctl_->peers) * 2 * sizeof(Post);
  return base_ + posts + (std::size_t{r} * 2 + (seq & 1)) * ctl_->slot_bytes;
}

const std::byte* Arena::input_of(uint32_t r, uint64_t seq) const { return slot(r, seq); }

bool Arena::still_holds(uint32_t r, uint64_t seq) const {
  return post(r, seq).seq1.load(std::memory_order_acquire) == seq + 1;
}

std::vector<uint32_t> Arena::not_posted(uint64_t seq) const {
  std::vector<uint32_t> missing;
  for (uint32_t r = 0; r < ctl_->peers; ++r)  // a later op in the same post means it came and went on
    if (post(r, seq).seq1.load(std::memory_order_acquire) < seq + 1) missing.push_back(r);
  return missing;
}

bool Arena::all_posted(uint64_t seq, bool& agree) const {
  agree = true;
  ArenaCall first;
  for (uint32_t r = 0; r < ctl_->peers; ++r) {
    const Post& p = post(r, seq);
    if (p.seq1.load(std::memory_order_acquire) != seq + 1) return false;
    const ArenaCall c = p.load();
    if (!c.fits || (r > 0 && !(c == first))) agree = false;
    if (r == 0) first = c;
  }
  return true;
}

void Arena::prefetch_inputs(uint32_t rank, uint64_t seq, std::size_t bytes) const {
  const std::size_t upto = std::min<std::size_t>(bytes, ctl_->slot_bytes);
  for (uint32_t r = 0; r < ctl_->peers; ++r) {
    if (r == rank) continue;
    const std::byte* at = slot(r, seq);
    for (std::size_t off = 0; off < upto; off += kLine) __builtin_prefetch(at + off, 0, 3);
  }
}

void Arena::ring() const {
  if (ctl_->sleepers.load(std::memory_order_seq_cst) == 0) return;
  ctl_->bell.fetch_add(1, std::memory_order_seq_cst);
  futex::wake(&ctl_->bell, futex::kAll, futex::Scope::shared);
}

Arena::Verdict Arena::settle(uint64_t seq, Verdict v) {
  auto& word = ctl_->verdict[seq % kVerdicts].v;
  const uint64_t want = (seq + 1) << 1 | (v == Verdict::go ? 1 : 0);
  uint64_t cur = word.load(std::memory_order_acquire);
  while ((cur >> 1) < seq + 1)
    // seq_cst, then the sleepers' count (in ring): either a sleeper sees the verdict after saying
    // it sleeps, or we see that it sleeps and wake it.
    if (word.compare_exchange_weak(cur, want, std::memory_order_seq_cst, std::memory_order_acquire)) {
      ring();
      return v;
    }
  // Settled by another peer; a word already taken by a later op means this one went slow (a go
  // needs every peer's post, so none can have moved on that far).
  return (cur >> 1) == seq + 1 && (cur & 1) ? Verdict::go : Verdict::slow;
}

Arena::Verdict Arena::meet(uint32_t rank, uint64_t seq, const ArenaCall& call, const void* input, std::size_t bytes,
                           Clock::time_point give_up, Patience patience) {
  Post& mine = post(rank, seq);
  if (call.fits && bytes > 0) std::memcpy(slot(rank, seq), input, bytes);
  mine.store(call);
  // A release store: no wait here for the slot's lines to leave the other cores' caches. Nobody
  // is woken for a post: a sleeper wakes for the verdict, which the last peer to post settles
  // (settle rings), having seen every post, this one included.
  mine.seq1.store(seq + 1, std::memory_order_release);
  auto& word = ctl_->verdict[seq % kVerdicts].v;
  Verdict v = Verdict::slow;
  // A go settled by another peer: its compare-and-swap came after it saw every post, so the inputs
  // are there; reading every post here as well makes that order this peer's own (it holds anyway,
  // but a race detector cannot follow it through a peer of another process, or another mapping).
  auto went = [&](Verdict got) {
    if (got == Verdict::go)
      for (uint32_t r = 0; r < ctl_->peers; ++r) (void)post(r, seq).seq1.load(std::memory_order_acquire);
    return got;
  };
  auto look = [&] {
    const uint64_t w = word.load(std::memory_order_acquire);
    if ((w >> 1) >= seq + 1) {
      v = went((w >> 1) == seq + 1 && (w & 1) ? Verdict::go : Verdict::slow);
      return true;
    }
    bool agree = false;
    if (all_posted(seq, agree)) {
      // The others' inputs start on their way here while the verdict's compare-and-swap takes
      // its own cache line (one cross-core transfer in parallel rather than after it).
      if (agree) prefetch_inputs(rank, seq, bytes);
      v = settle(seq, agree ? Verdict::go : Verdict::slow);
      return true;
    }
    if (ctl_->state.load(std::memory_order_acquire) == kClosed) {
      v = went(settle(seq, Verdict::slow));
      return true;
    }
    return false;
  };
  if (wait(look, give_up, patience)) return v;
  return went(settle(seq, Verdict::slow));
}

template <class Look>
bool Arena::wait(Look&& look, Clock::time_point give_up, Patience patience) const {
  if (look()) return true;
  const auto start = Clock::now();
  // Spin (the others are usually a few hundred nanoseconds away), or where peers outnumber the
  // cores give the core away between looks, so that the peer we wait for can run.
  const auto spin_end = std::min(give_up, start + patience.spin);
  for (unsigned i = 1;; ++i) {
    CHORUS_ARENA_PAUSE();
    if (look()) return true;
    if ((i & 63) == 0 && Clock::now() >= spin_end) break;
  }
  const auto yield_end = std::min(give_up, Clock::now() + patience.yield);
  while (Clock::now() < yield_end) {
    std::this_thread::yield();
    if (look()) return true;
  }
  for (;;) {
    const auto now = Clock::now();
    if (now >= give_up) return false;
    const uint32_t rung = ctl_->bell.load(std::memory_order_seq_cst);
    ctl_->sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (look()) {
      ctl_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
      return true;
    }
    futex::wait(&ctl_->bell, rung, std::min<Clock::duration>(give_up - now, std::chrono::milliseconds(10)),
                futex::Scope::shared);
    ctl_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (look()) return true;
  }
}

void Arena::conclude(uint32_t lead, uint64_t seq, const Status& how) {
  if (!how.is_ok()) {  // the text first, then the word that publishes it
    const std::string& m = how.message();
    const std::size_t n = std::min(m.size(), static_cast<std::size_t>(ctl_->slot_bytes) - sizeof(uint64_t));
    std::byte* at = slot(lead, seq);
    const uint64_t len = n;
    std::memcpy(at, &len, sizeof len);
    std::memcpy(at + sizeof len, m.data(), n);
  }
  // seq_cst, then the sleepers' count (in ring), as a verdict is settled.
  ctl_->done[seq % kVerdicts].v.store((seq + 1) << 16 | static_cast<uint16_t>(how.code()), std::memory_order_seq_cst);
  ring();
}

Arena::Heard Arena::await_conclusion(uint32_t lead, uint64_t seq, Clock::time_point give_up, Patience patience,
                                     Status& how, bool past_close) const {
  auto& word = ctl_->done[seq % kVerdicts].v;
  Heard heard = Heard::gave_up;
  auto look = [&] {
    const uint64_t w = word.load(std::memory_order_acquire);
    if ((w >> 16) == seq + 1) {
      const auto raw = static_cast<uint16_t>(w & 0xffff);  // another process wrote it: checked
      const Errc code = raw <= static_cast<uint16_t>(last_errc) ? static_cast<Errc>(raw) : Errc::internal;
      if (code == Errc::ok) {
        how = Status::ok();
      } else {
        const std::byte* at = slot(lead, seq);
        uint64_t len = 0;
        std::memcpy(&len, at, sizeof len);
        len = std::min<uint64_t>(len, ctl_->slot_bytes - sizeof len);
        how = Status(code, std::string(reinterpret_cast<const char*>(at + sizeof len), len));
      }
      heard = Heard::concluded;
      return true;
    }
    if (!past_close && ctl_->state.load(std::memory_order_acquire) == kClosed) {
      heard = Heard::closed;
      return true;
    }
    return false;
  };
  (void)wait(look, give_up, patience);
  return heard;
}

} // namespace chorus
