// all_reduce_coalesced: a list of tensors all-reduced in as few ops as it allows. An op costs a
// meeting of every peer whatever its size (about half a microsecond between two processes here,
// tens with more processes than cores or between hosts), so many small tensors cost mostly
// meetings: packed into one buffer they cost one. Copying into the buffer and back costs two
// passes over the bytes, which only pay for small tensors: larger ones (and GPU tensors) run as
// ops of their own, in place. How much one op packs is the planner's (plan_pack_bytes).
//
// Packing is safe only where every peer packs alike, so every peer first tells every other what
// it passes (one small all_gather): a list that differs fails every peer, with the same words,
// rather than reducing one peer's tensor into another's.
#include <algorithm>
#include <cstring>
#include <memory>

#include <chorus/peer.hpp>
#include "core/buffer_pool.hpp"
#include "runtime/peer/op_lanes.hpp"
#include "runtime/peer/run_op.hpp"
#include "strategies/planner.hpp"

namespace chorus {

namespace {

// What one peer passes, as every peer sees it: its own problem with the list (kMixed: not one
// dtype), the dtype, the number of tensors, their elements in all, a fingerprint of their shapes
// and of which are GPU tensors, in order, and the bytes the planner would pack into one op here
// (every peer packs the least of them, so that all run the same ops).
enum Word { kProblem, kDType, kCount, kElements, kPrint, kPack, kWords };
constexpr int64_t kMixed = 1;

uint64_t fnv(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 0x100000001b3ull;
  }
  return h;
}

Tensor record_of(const std::vector<Tensor>& ts, std::size_t pack) {
  std::vector<int64_t> w(kWords, 0);
  w[kPack] = static_cast<int64_t>(pack);
  uint64_t print = 0xcbf29ce484222325ull;
  std::size_t elements = 0;
  for (const auto& t : ts) {
    if (t.dtype() != ts[0].dtype()) w[kProblem] = kMixed;
    elements += t.numel();
    print = fnv(print, t.shape().size());
    for (int64_t d : t.shape()) print = fnv(print, static_cast<uint64_t>(d));
    print = fnv(print, t.is_cuda() ? 1 : 0);  // which GPU is each peer's own (one per rank, often)
  }
  w[kDType] = ts.empty() ? -1 : static_cast<int64_t>(ts[0].dtype());
  w[kCount] = static_cast<int64_t>(ts.size());
  w[kElements] = static_cast<int64_t>(elements);
  w[kPrint] = static_cast<int64_t>(print);
  return Tensor::from(w);
}

// "rank 1 passes 3 f32 tensors of 35 elements in all", "rank 0 passes no tensors".
std::string passes(uint32_t r, const int64_t* w) {
  const std::string who = "rank " + std::to_string(r) + " passes ";
  if (w[kCount] == 0) return who + "no tensors";
  return who + std::to_string(w[kCount]) + " " + std::string(to_string(static_cast<DType>(w[kDType]))) +
         (w[kCount] == 1 ? " tensor of " : " tensors of ") + std::to_string(w[kElements]) +
         (w[kElements] == 1 ? " element in all" : " elements in all");
}

// The first disagreement among the gathered records, the same on every peer (each reads the same
// words); for the caller's own mixed list, which tensors.
Status agree(const int64_t* all, uint32_t n, uint32_t me, const std::vector<Tensor>& ts) {
  const std::string op = "all_reduce_coalesced: ";
  for (uint32_t r = 0; r < n; ++r) {
    if (all[r * kWords + kProblem] != kMixed) continue;
    if (r != me) return {Errc::invalid_argument, op + "rank " + std::to_string(r) + "'s tensors are not all of one dtype"};
    for (std::size_t i = 1; i < ts.size(); ++i)
      if (ts[i].dtype() != ts[0].dtype())
        return {Errc::invalid_argument, op + "tensor " + std::to_string(i) + " is " + ts[i].describe() + " but tensor 0 is " +
                                            ts[0].describe() + ": the tensors of one call share a dtype"};
  }
  const int64_t* first = all;
  for (uint32_t r = 1; r < n; ++r) {
    const int64_t* w = all + r * kWords;
    if (w[kCount] != first[kCount] || w[kElements] != first[kElements])
      return {Errc::shape_mismatch, op + passes(0, first) + " but " + passes(r, w)};
    if (w[kDType] != first[kDType])
      return {Errc::dtype_mismatch, op + passes(0, first) + " but " + passes(r, w)};
    if (w[kPrint] != first[kPrint])
      return {Errc::shape_mismatch, op + "rank " + std::to_string(r) + "'s tensors differ from rank 0's in their shapes, "
                                         "order or devices (" + passes(0, first) + ", as does rank " + std::to_string(r) + ")"};
  }
  return Status::ok();
}

Status coalesced_of(Peer& p, std::vector<Tensor>& ts, ReduceOp op) {
  const uint32_t n = p.size();
  std::size_t pack = 0;
  if (const auto& st = PeerAccess::state(p)) pack = plan_pack_bytes(st->config, peer_impl::host_query(*st, OpKind::all_reduce));
  Tensor all = Tensor::zeros(DType::i64, {static_cast<int64_t>(n) * kWords});
  if (auto s = p.all_gather(record_of(ts, pack), all); !s) return s;
  const int64_t* words = all.data_as<int64_t>();
  if (auto s = agree(words, n, p.rank(), ts); !s) return s;
  if (ts.empty()) return Status::ok();
  for (uint32_t r = 0; r < n; ++r) pack = std::min(pack, static_cast<std::size_t>(words[r * kWords + kPack]));
  // A tensor larger than this runs as an op of its own: at an eighth of the arena's slot, packing
  // saves less than its copies cost (between two processes here: docs/benchmarks.md).
  const std::size_t alone = pack / 8;
  const DType dtype = ts[0].dtype();
  const std::size_t esize = dtype_size(dtype);
  // The packed tensors of the buffer being filled, by index; one scratch serves every buffer.
  std::vector<std::size_t> packed;
  std::size_t bytes = 0;
  auto flush = [&]() -> Status {
    if (packed.empty()) return Status::ok();
    Status s;
    if (packed.size() == 1) {
      s = p.all_reduce(ts[packed[0]], op);
    } else {
      // Reused across calls: a fresh buffer costs a page fault per 4 KiB, as much as the copies.
      static BufferPool pool(std::size_t{16} << 20);
      std::shared_ptr<std::byte> scratch = pool.take(bytes);  // not zeroed: every byte is written
      std::size_t at = 0;
      for (std::size_t i : packed) {
        std::memcpy(scratch.get() + at, ts[i].data(), ts[i].nbytes());
        at += ts[i].nbytes();
      }
      Tensor buf = Tensor::borrow(scratch.get(), dtype, {static_cast<int64_t>(at / esize)});
      s = p.all_reduce(buf, op);
      at = 0;
      for (std::size_t i : packed) {
        if (s) std::memcpy(ts[i].data(), scratch.get() + at, ts[i].nbytes());
        at += ts[i].nbytes();
      }
    }
    packed.clear();
    bytes = 0;
    return s;
  };
  for (std::size_t i = 0; i < ts.size(); ++i) {
    Tensor& t = ts[i];
    if (t.is_cuda() || t.nbytes() > alone) {
      if (auto s = p.all_reduce(t, op); !s) return s;
      continue;
    }
    if (bytes + t.nbytes() > pack)
      if (auto s = flush(); !s) return s;
    packed.push_back(i);
    bytes += t.nbytes();
  }
  return flush();
}

} // namespace

Status Peer::all_reduce_coalesced(std::vector<Tensor>& tensors, ReduceOp op) {
  return peer_impl::in_lane<Status>(state_, [&] { return coalesced_of(*this, tensors, op); });
}

Work Peer::all_reduce_coalesced_async(std::vector<Tensor> tensors, ReduceOp op, OpOptions o) {
  return peer_impl::run_async(state_, peer_impl::LaneKey::collective(), o,
                              [self = *this, tensors = std::move(tensors), op](WorkState&) mutable {
                                return coalesced_of(self, tensors, op);
                              });
}

} // namespace chorus
