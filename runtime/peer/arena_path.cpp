#include "runtime/peer/arena_path.hpp"

#include <cstdlib>
#include <cstring>

#include "actors/local_server/op_validation.hpp"
#include "strategies/arena_ops.hpp"

namespace chorus::peer_impl {

ArenaCall describe_call(const OpRequestData& req, const Tensor& in, const Tensor& out, uint32_t n, uint32_t rank) {
  ArenaCall c;
  c.kind = req.op.kind;
  const bool is_root = rank == static_cast<uint32_t>(req.op.root);
  if (reduces(req.op.kind) && (!in.defined() || !reduce_op_valid(in.dtype(), req.op.redop))) return c;
  if (rooted(req.op.kind) && static_cast<uint32_t>(req.op.root) >= n) return c;
  if (in.defined() && out.defined() && in.dtype() != out.dtype()) return c;
  const std::size_t ni = in.defined() ? in.numel() : 0, no = out.defined() ? out.numel() : 0;
  bool ok = false;
  std::size_t count = 0;
  switch (req.op.kind) {
    case OpKind::barrier: ok = true; break;
    case OpKind::all_reduce: ok = out.defined() && no == ni, count = ni; break;
    case OpKind::reduce: ok = !is_root || (out.defined() && no == ni), count = ni; break;
    case OpKind::broadcast: ok = out.defined() && (!is_root || (in.defined() && ni == no)), count = no; break;
    case OpKind::all_gather: ok = in.defined() && out.defined() && no == n * ni, count = ni; break;
    case OpKind::reduce_scatter: ok = out.defined() && ni == n * no, count = no; break;
    case OpKind::all_to_all: ok = in.defined() && out.defined() && ni % n == 0 && no == ni, count = ni / n; break;
    case OpKind::gather: ok = in.defined() && (!is_root || (out.defined() && no == n * ni)), count = ni; break;
    case OpKind::scatter: ok = out.defined() && (!is_root || (in.defined() && ni == n * no)), count = no; break;
    default: return c;
  }
  if (!ok) return c;
  if (req.op.kind != OpKind::barrier) {
    // The tensor every peer must pass alike, as check_agreement compares it.
    const bool out_agrees = req.op.kind == OpKind::broadcast || req.op.kind == OpKind::scatter;
    const Tensor& agreed = out_agrees ? out : in;
    const Shape& shape = agreed.shape();
    if (shape.size() > 4) return c;
    c.dtype = agreed.dtype();
    c.ndim = static_cast<uint32_t>(shape.size());
    for (std::size_t d = 0; d < shape.size(); ++d) c.dims[d] = shape[d];
  }
  if (reduces(req.op.kind)) c.redop = req.op.redop;
  if (rooted(req.op.kind)) c.root = static_cast<uint32_t>(req.op.root);
  c.count = count;
  c.fits = true;
  return c;
}

namespace {

// A call on host tensors fits where its input fits the slot.
ArenaCall describe(const OpRequestData& req, const Tensor& in, const Tensor& out, std::size_t slot, uint32_t n,
                   uint32_t rank) {
  if ((in.defined() && in.is_cuda()) || (out.defined() && out.is_cuda())) return ArenaCall{.kind = req.op.kind};
  ArenaCall c = describe_call(req, in, out, n, rank);
  c.fits = c.fits && arena_input_bytes(ArenaOp::of(c, n, rank)) <= slot;
  return c;
}

} // namespace

std::shared_ptr<ArenaSeat> local_arena(uint32_t peers) {
  const std::size_t slot = arena_slot_bytes(peers);
  if (slot == 0) return nullptr;
  const std::size_t bytes = Arena::region_bytes(peers, slot);
  void* mem = std::aligned_alloc(64, bytes);
  if (!mem) return nullptr;
  auto seat = std::make_shared<ArenaSeat>();
  seat->memory = std::shared_ptr<void>(mem, [](void* p) { std::free(p); });
  seat->arena = Arena::create(mem, peers, slot, 0);
  seat->arena.open();
  return seat;
}

void enter_arena(PeerState& s, OpRecord& rec, OpRequestData& req, const Tensor& data) {
  req.op.seq = s.seq++;
  rec.entered = true;
  rec.since = Clock::now();
  record_begin(s, rec, req, data);
}

std::optional<Status> arena_collective(PeerState& s, OpRecord& rec, OpRequestData& req, const Tensor& in,
                                       const Tensor& out) {
  Arena& arena = s.arena->arena;
  enter_arena(s, rec, req, in.defined() ? in : out);
  const uint64_t seq = req.op.seq;
  const ArenaCall call = describe(req, in, out, arena.slot_bytes(), arena.peers(), s.rank);
  const ArenaOp op = ArenaOp::of(call, arena.peers(), s.rank);
  const std::size_t bytes = call.fits ? arena_input_bytes(op) : 0;
  const Arena::Verdict v = arena.meet(op.rank, seq, call, in.defined() ? in.data() : nullptr, bytes,
                                      rec.since + arena_wait(s.config), patience_for(op.n));
  if (v == Arena::Verdict::slow) return std::nullopt;
  record_matched(s, rec, RunStrategy::of(RunStrategy::Path::arena));
  return record_end(s, rec, run_arena_op(arena, seq, op, out.defined() ? out.data() : nullptr));
}

} // namespace chorus::peer_impl
