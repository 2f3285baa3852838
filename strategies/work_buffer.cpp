#include "strategies/work_buffer.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "core/buffer_pool.hpp"
#include "strategies/reduce_kernels.hpp"
#include "strategies/schedule.hpp"

namespace chorus {

WorkBuffer WorkBuffer::bind(OpKind op, int p, int n, int root, std::size_t count, DType dtype,
                            const std::byte* in, std::byte* out) {
  WorkBuffer w;
  w.dtype_ = dtype;
  w.esize_ = dtype_size(dtype);
  const std::size_t c = count, nc = static_cast<std::size_t>(n) * count, e = w.esize_;
  auto user = [&](std::size_t b, std::size_t en, std::byte* mem) { w.parts_.push_back({b, en, mem, false}); };
  auto scratch = [&](std::size_t b, std::size_t en) { w.parts_.push_back({b, en, nullptr, true}); };
  auto init = [&](std::size_t b, std::size_t en, const std::byte* src) {
    w.add_pending(b, en, src);
  };
  switch (op) {
    case OpKind::all_reduce:
      user(0, c, out);
      scratch(c, 2 * c);  // only schedules that fold elsewhere first write it (oneshot)
      init(0, c, in);
      break;
    case OpKind::reduce:
      if (p == root) user(0, c, out); else scratch(0, c);
      init(0, c, in);
      break;
    case OpKind::broadcast:
      user(0, c, out);
      if (p == root) init(0, c, in);
      break;
    case OpKind::all_gather:
      user(0, nc, out);
      init(p * c, (p + 1) * c, in);
      break;
    case OpKind::reduce_scatter:
      scratch(0, nc);
      init(0, nc, in);
      w.finals_.push_back({p * c, c, out});
      break;
    case OpKind::gather:
      if (p == root) user(0, nc, out); else scratch(0, nc);
      init(p * c, (p + 1) * c, in);
      break;
    case OpKind::scatter:
      scratch(0, nc);
      if (p == root) init(0, nc, in);
      w.finals_.push_back({p * c, c, out});
      break;
    case OpKind::all_to_all:
      scratch(0, nc);
      user(nc, 2 * nc, out);
      init(0, nc, in);
      break;
    case OpKind::barrier:
    case OpKind::send:
    case OpKind::recv:
      break;
  }
  // In-place calls need no initial copy: drop pending ranges whose source is their own memory.
  std::erase_if(w.pending_, [&](const Pending& r) {
    for (auto& pt : w.parts_)
      if (!pt.scratch && r.begin >= pt.begin && r.end <= pt.end)
        return pt.mem + (r.begin - pt.begin) * e == r.src;
    return false;
  });
  // Initial content that lives inside memory the op writes (e.g. all_to_all with one tensor as
  // input and output) cannot be read lazily: a receive would overwrite it before it is sent.
  // Copy such ranges into place before any peer can touch them.
  std::vector<std::pair<std::size_t, std::size_t>> eager;
  for (auto& r : w.pending_) {
    const std::byte* s0 = r.src;
    const std::byte* s1 = r.src + (r.end - r.begin) * e;
    for (auto& pt : w.parts_)
      if (!pt.scratch && pt.mem && s0 < pt.mem + (pt.end - pt.begin) * e && pt.mem < s1)
        eager.emplace_back(r.begin, r.end - r.begin);
  }
  for (auto& [b, cnt] : eager) w.materialize(b, cnt);
  return w;
}

void WorkBuffer::add_pending(std::size_t begin, std::size_t end, const std::byte* src) {
  if (begin >= end || src == nullptr) return;
  pending_.push_back({begin, end, src});
  std::sort(pending_.begin(), pending_.end(), [](auto& a, auto& b) { return a.begin < b.begin; });
}

WorkBuffer::Part& WorkBuffer::part_for(std::size_t off, std::size_t cnt) {
  for (auto& pt : parts_)
    if (off >= pt.begin && off + cnt <= pt.end) return pt;
  throw std::logic_error("schedule region [" + std::to_string(off) + ", " +
                         std::to_string(off + cnt) + ") crosses or leaves the work buffer's parts");
}

std::byte* WorkBuffer::mem_at(std::size_t off, std::size_t cnt) {
  Part& pt = part_for(off, cnt);
  if (pt.mem == nullptr) {
    // Scratch is taken the first time something is written into it, from a pool: an op's scratch
    // of 128 KiB and more was mapped afresh by malloc every time, a page fault per 4 KiB.
    static BufferPool pool(std::size_t{256} << 20);
    scratch_.push_back(pool.take((pt.end - pt.begin) * esize_));
    pt.mem = scratch_.back().get();
  }
  return pt.mem + (off - pt.begin) * esize_;
}

void WorkBuffer::forget_pending(std::size_t off, std::size_t cnt) {
  // In place (the ranges stay sorted and disjoint): this runs for most steps of every op, and a
  // fresh vector each time was an allocation each.
  const std::size_t end = off + cnt;
  for (std::size_t i = 0; i < pending_.size();) {
    const Pending r = pending_[i];
    if (r.end <= off || r.begin >= end) {
      ++i;
    } else if (r.begin < off && r.end > end) {  // the middle goes: two ranges remain
      pending_[i] = {r.begin, off, r.src};
      pending_.insert(pending_.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                      {end, r.end, r.src + (end - r.begin) * esize_});
      i += 2;
    } else if (r.begin < off) {
      pending_[i++] = {r.begin, off, r.src};
    } else if (r.end > end) {
      pending_[i++] = {end, r.end, r.src + (end - r.begin) * esize_};
    } else {
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
}

void WorkBuffer::materialize(std::size_t off, std::size_t cnt) {
  const std::size_t end = off + cnt;
  for (auto& r : pending_) {
    std::size_t b = std::max(r.begin, off), en = std::min(r.end, end);
    if (b >= en) continue;
    std::memmove(mem_at(b, en - b), r.src + (b - r.begin) * esize_, (en - b) * esize_);
  }
  forget_pending(off, cnt);
}

const std::byte* WorkBuffer::read_ptr(std::size_t off, std::size_t cnt) {
  if (cnt == 0) return nullptr;  // zero-element messages only synchronise
  for (auto& r : pending_)
    if (off >= r.begin && off + cnt <= r.end) return r.src + (off - r.begin) * esize_;
  materialize(off, cnt);
  return mem_at(off, cnt);
}

void WorkBuffer::reduce_from(std::size_t off, std::size_t cnt, const std::byte* src, ReduceOp op) {
  if (cnt == 0) return;
  const std::size_t end = off + cnt;
  std::size_t at = off;
  // Walk [off, end): pending pieces combine initial content with src; the rest combine in place.
  for (auto& r : pending_) {
    if (r.end <= at || r.begin >= end) continue;
    if (r.begin > at) {
      std::byte* d = mem_at(at, r.begin - at);
      reduce2(dtype_, op, d, d, src + (at - off) * esize_, r.begin - at);
      at = r.begin;
    }
    std::size_t en = std::min(r.end, end);
    reduce2(dtype_, op, mem_at(at, en - at), r.src + (at - r.begin) * esize_,
            src + (at - off) * esize_, en - at);
    at = en;
  }
  if (at < end) {
    std::byte* d = mem_at(at, end - at);
    reduce2(dtype_, op, d, d, src + (at - off) * esize_, end - at);
  }
  forget_pending(off, cnt);
}

void WorkBuffer::reduce_many(std::size_t off, std::size_t cnt, const std::byte* const* srcs,
                             std::size_t nsrc, ReduceOp op) {
  if (cnt == 0 || nsrc == 0) return;
  if (nsrc == 1) return reduce_from(off, cnt, srcs[0], op);
  // The first operand is the region's current content: the initial content read in place when
  // the whole region is still untouched, else the work memory (materialized first if need be).
  const std::byte* base = nullptr;
  for (auto& r : pending_)
    if (off >= r.begin && off + cnt <= r.end) base = r.src + (off - r.begin) * esize_;
  if (!base) {
    materialize(off, cnt);
    base = mem_at(off, cnt);
  }
  thread_local std::vector<const void*> all;
  all.assign(1, base);
  all.insert(all.end(), srcs, srcs + nsrc);
  reduce_n(dtype_, op, mem_at(off, cnt), all.data(), all.size(), cnt);
  forget_pending(off, cnt);
}

std::byte* WorkBuffer::write_ptr(std::size_t off, std::size_t cnt) {
  if (cnt == 0) return nullptr;
  std::byte* p = mem_at(off, cnt);
  forget_pending(off, cnt);
  return p;
}

std::byte* WorkBuffer::landing_ptr(std::size_t off, std::size_t cnt) {
  if (cnt == 0) return nullptr;
  for (auto& r : pending_) {
    if (off < r.begin || off + cnt > r.end) continue;
    const std::byte* src = r.src + (off - r.begin) * esize_;
    std::byte* mem = mem_at(off, cnt);
    const std::size_t len = cnt * esize_;
    return src + len <= mem || mem + len <= src ? mem : nullptr;
  }
  return nullptr;
}

void WorkBuffer::copy_from(std::size_t off, std::size_t cnt, const std::byte* src) {
  if (cnt == 0) return;
  std::memcpy(mem_at(off, cnt), src, cnt * esize_);
  forget_pending(off, cnt);
}

void WorkBuffer::local_copy(std::size_t dst, std::size_t src, std::size_t cnt) {
  if (cnt == 0) return;
  const std::byte* s = read_ptr(src, cnt);
  std::memmove(mem_at(dst, cnt), s, cnt * esize_);
  forget_pending(dst, cnt);
}

void WorkBuffer::finish() {
  for (auto& f : finals_) {
    if (f.count == 0 || f.dst == nullptr) continue;
    const std::byte* s = read_ptr(f.begin, f.count);
    if (s != f.dst) std::memmove(f.dst, s, f.count * esize_);
  }
  // Output ranges nobody wrote still owe the caller their initial content.
  for (auto& r : std::vector<Pending>(pending_)) {
    for (auto& pt : parts_) {
      std::size_t b = std::max(r.begin, pt.begin), en = std::min(r.end, pt.end);
      if (!pt.scratch && b < en) std::memmove(pt.mem + (b - pt.begin) * esize_, r.src + (b - r.begin) * esize_, (en - b) * esize_);
    }
  }
  pending_.clear();
}

} // namespace chorus
