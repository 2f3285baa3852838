// An append-only log of spans with one writer at a time (a peer's calls, which PeerTrace
// serialises) and one reader (the Runtime writing the trace at shutdown), which takes no lock:
// the writer fills a record, then publishes it
// by a release store of the count; the reader reads only the published prefix, which nobody
// changes any more. Records live in chunks taken from a TraceBudget shared by the process, so
// memory stays bounded: once the budget is spent, new records are dropped and counted.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>

namespace chorus {

// How many records (ops and steps) the traces of a process may hold in memory together. Taken a
// chunk at a time (so the peers' threads rarely touch it) and given back when a log goes.
class TraceBudget {
 public:
  explicit TraceBudget(uint64_t records) : left_(records) {}
  // Up to `want` records; 0 once the budget is spent.
  uint64_t take(uint64_t want) {
    uint64_t left = left_.load(std::memory_order_relaxed);  // spent: a read, no write to share
    while (left > 0 && !left_.compare_exchange_weak(left, left - std::min(left, want))) {
    }
    return std::min(left, want);
  }
  void give_back(uint64_t n) { left_.fetch_add(n); }
  uint64_t left() const { return left_.load(); }

 private:
  std::atomic<uint64_t> left_;
};

inline constexpr uint64_t kProcessTraceRecords = 1'000'000;

// The budget of every trace of the process.
inline TraceBudget& process_trace_budget() {
  static TraceBudget budget(kProcessTraceRecords);
  return budget;
}

template <class Record>
class SpanLog {
 public:
  // Records per chunk: the first small (a process may have thousands of peers, each taking a
  // chunk at its first op), then doubling up to one allocation per kMaxChunk records.
  static constexpr uint64_t kFirstChunk = 64, kMaxChunk = 1024;

  explicit SpanLog(TraceBudget& budget) : budget_(budget) {}
  ~SpanLog() { budget_.give_back(capacity_); }
  SpanLog(const SpanLog&) = delete;
  SpanLog& operator=(const SpanLog&) = delete;

  // The writer: false when the budget is spent (the record is counted as dropped).
  bool push(const Record& r) {
    const uint64_t n = count_.load(std::memory_order_relaxed);
    if (n == capacity_ && !grow()) {
      dropped_.store(dropped_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      return false;
    }
    tail_->records[n - tail_->first] = r;
    count_.store(n + 1, std::memory_order_release);
    return true;
  }

  // The reader: every published record, oldest first.
  template <class F>
  void for_each(F&& f) const {
    const uint64_t n = count_.load(std::memory_order_acquire);
    const Chunk* c = n ? head_.get() : nullptr;  // links past the published records may be changing
    for (uint64_t i = 0; i < n;) {
      for (uint64_t k = 0; k < c->size && i < n; ++k, ++i) f(c->records[k]);
      if (i < n) c = c->next.get();
    }
  }
  uint64_t size() const { return count_.load(std::memory_order_acquire); }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  struct Chunk {
    uint64_t first = 0, size = 0;  // the index of its first record, and how many it holds
    std::unique_ptr<Record[]> records;
    std::unique_ptr<Chunk> next;
  };

  // A chunk from the budget (a smaller one when less is left); the reader reaches it only through
  // records published after this, so linking it needs no ordering of its own.
  bool grow() {
    const uint64_t got = budget_.take(tail_ ? std::min(2 * tail_->size, kMaxChunk) : kFirstChunk);
    if (got == 0) return false;
    auto c = std::make_unique<Chunk>();
    c->first = capacity_;
    c->size = got;
    c->records = std::make_unique<Record[]>(got);
    Chunk* raw = c.get();
    (tail_ ? tail_->next : head_) = std::move(c);
    tail_ = raw;
    capacity_ += got;
    return true;
  }

  TraceBudget& budget_;
  std::unique_ptr<Chunk> head_;
  Chunk* tail_ = nullptr;
  uint64_t capacity_ = 0;  // the writer's alone
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> dropped_{0};
};

} // namespace chorus
