#include "runtime/peer/gpu_arena_path.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "actors/global_client/global_client.hpp"
#include "actors/local_server/op_validation.hpp"
#include "runtime/peer/arena_path.hpp"
#include "cuda/device_status.hpp"
#include "cuda/ipc_calls.hpp"
#include "strategies/tuning.hpp"

namespace chorus::peer_impl {

namespace {

// What a peer posts in its slot for a GPU op: where its buffers are, for its own process (node)
// and for the others (handles).
struct GpuPost {
  uint32_t node = 0;    // the poster's node: the lead uses its own node's addresses as they are
  uint8_t has_in = 0, has_out = 0;
  gpu::GpuUuid gpu{};   // the GPU, as every process names it
  uint64_t in_addr = 0, out_addr = 0;
  gpu::IpcBuffer in, out;
};
static_assert(std::is_trivially_copyable_v<GpuPost>, "posted as bytes");

// The GPU as ArenaCall::place: a digest of its UUID, never 0 (host memory). The lead compares the
// whole UUIDs before it runs the op.
uint32_t place_of(const gpu::GpuUuid& id) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char b : id) h = (h ^ b) * 0x100000001b3ull;
  const auto p = static_cast<uint32_t>(h ^ (h >> 32));
  return p ? p : 1;
}

// This peer's call: fits where the call is well formed and every tensor it passes lies on one
// GPU (its identity in `post` and the call's place). Nothing is exported yet.
ArenaCall describe_gpu(PeerState& s, gpu::IpcCalls& ipc, const OpRequestData& req, const Tensor& in,
                       const Tensor& out, uint32_t n, GpuPost& post, int& device) {
  ArenaCall c = describe_call(req, in, out, n, s.rank);
  if (!c.fits) return c;
  c.fits = false;
  const Tensor& o = out.defined() ? out : in;  // as the local server's device run takes them
  device = -1;
  for (const Tensor* t : {&in, &o}) {
    if (!t->defined()) continue;
    if (!t->is_cuda() || (device >= 0 && t->device().index != device)) return c;
    device = t->device().index;
  }
  if (device < 0 || !ipc.identify(device, post.gpu).is_ok()) return c;
  post.node = s.global ? s.global->node_id() : 0;
  c.place = place_of(post.gpu);
  c.fits = true;
  return c;
}

// Where this peer's buffers lie, in `post`: the output is the input where the call passes one tensor.
void place_buffers(const Tensor& in, const Tensor& out, GpuPost& post) {
  const Tensor& o = out.defined() ? out : in;
  if (in.defined()) {
    post.has_in = 1;
    post.in_addr = reinterpret_cast<uintptr_t>(in.data());
  }
  if (o.defined()) {
    post.has_out = 1;
    post.out_addr = reinterpret_cast<uintptr_t>(o.data());
  }
}

// This peer's buffers as handles too, in `post`: whether they could be exported.
bool export_buffers(gpu::IpcCalls& ipc, int device, const Tensor& in, const Tensor& out, GpuPost& post) {
  const Tensor& o = out.defined() ? out : in;
  if (in.defined() && !ipc.export_buffer(device, in.data(), post.in).is_ok()) return false;
  if (o.defined()) {
    if (o.data() == in.data()) post.out = post.in;
    else if (!ipc.export_buffer(device, o.data(), post.out).is_ok()) return false;
  }
  place_buffers(in, out, post);
  return true;
}

// The lead: every peer's buffers opened here, the plan run over them. An error is every peer's.
Status lead(gpu::IpcCalls& ipc, const Arena& arena, uint64_t seq, const ArenaOp& op,
            const GpuPost& mine, int device, const std::string& label, Clock::time_point deadline) {
  gpu::DeviceCollective c;
  static_cast<OpDesc&>(c) = op;
  c.on_device = true;
  c.label = label;
  // What this op opened is held until its plan has run (a held mapping is never closed).
  struct Held {
    gpu::IpcCalls& ipc;
    int device;
    std::vector<gpu::IpcBuffer> buffers;
    ~Held() {
      for (const auto& b : buffers) ipc.release_buffer(device, b);
    }
  } held{ipc, device, {}};
  for (uint32_t r = 0; r < op.n; ++r) {
    GpuPost p;
    std::memcpy(&p, arena.input_of(r, seq), sizeof p);
    if (!arena.still_holds(r, seq)) return {Errc::internal, label + ": rank " + std::to_string(r) + "'s post changed under the lead"};
    if (p.gpu != mine.gpu)
      return {Errc::device_mismatch, label + ": ranks " + std::to_string(op.rank) + " and " + std::to_string(r) +
                                         " pass tensors on different GPUs"};
    gpu::DevicePeerBuffers b;
    b.device = device;
    auto where = [&](bool has, uint64_t addr, const gpu::IpcBuffer& h, void*& at) -> Status {
      if (!has) return Status::ok();
      if (p.node == mine.node) {
        at = reinterpret_cast<void*>(static_cast<uintptr_t>(addr));
        return Status::ok();
      }
      Status st = ipc.open_buffer(device, h, &at);
      if (st.is_ok()) held.buffers.push_back(h);
      return gpu::in_context(label + ": rank " + std::to_string(r) + "'s buffer", std::move(st));
    };
    void* in = nullptr;
    if (auto e = where(p.has_in, p.in_addr, p.in, in); !e.is_ok()) return e;
    b.in = in;
    if (p.has_in && p.has_out && p.out_addr == p.in_addr) b.out = in;  // in place: opened once
    else if (auto e = where(p.has_out, p.out_addr, p.out, b.out); !e.is_ok()) return e;
    c.peers.push_back(b);
  }
  return ipc.run(c, deadline);
}

uint32_t lead_of(const ArenaOp& op) { return rooted(op.kind) ? static_cast<uint32_t>(op.root) : 0; }

// After a go: the lead runs the op and concludes it in the arena (concluded, `how` its status);
// the others wait for its word until `give_up`.
Arena::Heard lead_or_wait(gpu::IpcCalls* ipc, Arena& arena, uint64_t seq, const ArenaOp& op, const GpuPost& post,
                          int device, const std::string& label, Clock::time_point deadline, Clock::time_point give_up,
                          Status& how) {
  if (op.rank == lead_of(op)) {
    how = lead(*ipc, arena, seq, op, post, device, label, deadline);
    arena.conclude(op.rank, seq, how);
    return Arena::Heard::concluded;
  }
  return arena.await_conclusion(lead_of(op), seq, give_up, patience_for(op.n), how);
}

} // namespace

std::optional<Status> gpu_arena_collective(PeerState& s, OpRecord& rec, OpRequestData& req, const Tensor& in,
                                           const Tensor& out) {
  gpu::IpcCalls* ipc = gpu::ipc_calls();
  if (!ipc) return std::nullopt;
  Arena& arena = s.arena->arena;
  enter_arena(s, rec, req, in.defined() ? in : out);
  GpuPost post;
  int device = -1;
  ArenaCall call = describe_gpu(s, *ipc, req, in, out, arena.peers(), post, device);
  if (sizeof post > arena.slot_bytes()) call.fits = false;
  const ArenaOp op = ArenaOp::of(call, arena.peers(), s.rank);
  // Two meetings. The first compares the calls and the GPUs only, so that peers on GPUs of their
  // own (NCCL's deployment) learn it before anyone exports a buffer; the second, under the next
  // sequence number (every peer takes it alike after a go), carries the handles, and goes slow
  // where some peer could not export its buffers. Waits longer than a host op's: peers of GPU
  // work are often far apart, and the ordinary path cannot run processes sharing a GPU through
  // NCCL; half the timeout leaves the ordinary path time to name a peer that never comes.
  const Clock::time_point meet_by = rec.since + op_timeout(s) / 2;
  const uint64_t first = req.op.seq;  // the op's name in messages, as the flight recorder has it
  if (arena.meet(op.rank, first, call, nullptr, 0, meet_by, patience_for(op.n)) == Arena::Verdict::slow)
    return std::nullopt;
  req.op.seq = s.seq++;
  const uint64_t seq = req.op.seq;
  call.fits = export_buffers(*ipc, device, in, out, post);
  if (arena.meet(op.rank, seq, call, &post, call.fits ? sizeof post : 0, meet_by, patience_for(op.n)) ==
      Arena::Verdict::slow)
    return std::nullopt;
  record_matched(s, rec, RunStrategy::of(RunStrategy::Path::cuda_ipc));
  const std::string label = std::string(to_string(op.kind)) + " #" + std::to_string(first);
  const uint32_t lead_rank = lead_of(op);
  // The lead's run gives up at the deadline and answers within 2 s of it (cuda/gpu.cpp).
  const Clock::time_point deadline = rec.since + op_timeout(s), give_up = deadline + std::chrono::seconds(3);
  Status how;
  Arena::Heard heard = lead_or_wait(ipc, arena, seq, op, post, device, label, deadline, give_up, how);
  // Closed: a node was lost (or this one is closing). A lead still running may yet conclude;
  // otherwise the loss, once this node has heard of it (at once, or through the orchestrator), is
  // the answer.
  while (heard == Arena::Heard::closed) {
    if (Status lost = s.global->lost(); !lost.is_ok()) {
      how = {lost.code(), label + ": " + lost.message()};
      heard = Arena::Heard::concluded;
    } else if (Clock::now() < give_up) {
      const auto look_again = std::min(give_up, Clock::now() + std::chrono::milliseconds(10));
      if (arena.await_conclusion(lead_rank, seq, look_again, Patience{}, how, true) == Arena::Heard::concluded)
        heard = Arena::Heard::concluded;
    } else {
      heard = Arena::Heard::gave_up;
    }
  }
  if (heard == Arena::Heard::gave_up)
    how = {Errc::timeout, label + ": rank " + std::to_string(lead_rank) + " (node " +
                              std::to_string(s.global->node_of(lead_rank)) +
                              "), which runs it on the shared GPU for every process, did not finish it in time"};
  return record_end(s, rec, how);
}

std::optional<Status> gpu_local_arena_collective(PeerState& s, OpRecord& rec, OpRequestData& req, const Tensor& in,
                                                 const Tensor& out) {
  gpu::IpcCalls* ipc = gpu::ipc_calls();
  Arena& arena = s.arena->arena;
  enter_arena(s, rec, req, in.defined() ? in : out);
  GpuPost post;
  int device = -1;
  // Without the GPU layer's calls the call is posted as one that does not fit, so that the others
  // learn it at once.
  ArenaCall call = ipc ? describe_gpu(s, *ipc, req, in, out, arena.peers(), post, device) : ArenaCall{.kind = req.op.kind};
  if (sizeof post > arena.slot_bytes()) call.fits = false;
  if (call.fits) place_buffers(in, out, post);
  const ArenaOp op = ArenaOp::of(call, arena.peers(), s.rank);
  const uint64_t seq = req.op.seq;
  if (arena.meet(op.rank, seq, call, &post, call.fits ? sizeof post : 0, rec.since + arena_wait(s.config),
                 patience_for(op.n)) == Arena::Verdict::slow)
    return std::nullopt;
  record_matched(s, rec, RunStrategy::of(RunStrategy::Path::device));
  const std::string label = std::string(to_string(op.kind)) + " #" + std::to_string(seq);
  const Clock::time_point deadline = rec.since + op_timeout(s), give_up = deadline + std::chrono::seconds(3);
  Status how;
  Arena::Heard heard = lead_or_wait(ipc, arena, seq, op, post, device, label, deadline, give_up, how);
  // A close of the arena (the runtime shutting down) does not stop a lead of this process.
  if (heard == Arena::Heard::closed) heard = arena.await_conclusion(lead_of(op), seq, give_up, Patience{}, how, true);
  if (heard != Arena::Heard::concluded)
    how = {Errc::timeout, label + ": peer " + std::to_string(lead_of(op)) +
                              ", which runs it on the GPU for every peer, did not finish it in time"};
  return record_end(s, rec, how);
}

} // namespace chorus::peer_impl
