#include "runtime/peer/run_op.hpp"

#include "observability/flight/flight_recorder.hpp"
#include "actors/global_client/global_client.hpp"
#include "runtime/peer/arena_path.hpp"
#include "runtime/peer/gpu_arena_path.hpp"
#include "runtime/runtime_impl.hpp"
#include "observability/trace/peer_trace.hpp"
#include "core/log.hpp"
#include "cuda/staging.hpp"
#include "strategies/planner.hpp"
#include "strategies/reduce_kernels.hpp"

namespace chorus::peer_impl {

Status no_peer() { return {Errc::not_registered, "this Peer handle was never registered"}; }

Status already_finished(PeerId who) {
  return {Errc::finished, "peer " + std::to_string(who) + " has already finished"};
}

OpRequestData make_op(OpKind k, ReduceOp op, PeerId root) {
  OpRequestData r;
  r.op.kind = k;
  r.op.redop = op;
  r.op.root = static_cast<int>(root);  // as given: the server checks it (op_validation.cpp)
  return r;
}

OpRequestData make_p2p(OpKind k, PeerId other, uint64_t tag) {
  OpRequestData r = make_op(k);
  r.other = other;
  r.tag = tag;
  return r;
}

bool on_other_node(const PeerState& s, PeerId other) {
  if (!s.global || other >= s.members.size()) return false;
  return s.global->node_of(s.members[other]) != s.global->node_id();
}

Status callable(const PeerState& s) {
  if (s.finished) return already_finished(s.id);
  if (s.destroyed) return Status(Errc::invalid_argument, "group " + std::to_string(s.group) + " was destroyed by this peer");
  return Status::ok();
}

Call op_call(const PeerState& s, OpRequestData req, const Tensor& in, const Tensor& out, Status local_error) {
  req.peer = s.id;
  req.epoch = s.epoch;
  req.op.group = s.group;
  req.input = TensorMeta::of(in);
  req.output = TensorMeta::of(out);
  Call call;
  call.request = std::move(req);
  call.input = in;
  call.output = out;
  call.local_error = local_error.is_ok() ? start_failure() : std::move(local_error);
  call.timeout = op_timeout(s);
  call.timeout_given = op_timeout_given();
  return call;
}

std::shared_ptr<Reply> enter_request(PeerState& s, OpRecord& rec, OpRequestData req, const Tensor& in,
                                     const Tensor& out, Status& status, Status local_error) {
  if (status = callable(s); !status) return nullptr;
  if (req.op.kind != OpKind::send && req.op.kind != OpKind::recv && !rec.entered) req.op.seq = s.seq++;
  if (!rec.entered) record_begin(s, rec, req, in.defined() ? in : out);
  Call call = op_call(s, std::move(req), in, out, std::move(local_error));
  auto reply = call.reply;
  s.rt->core->on_op(std::move(call));
  return reply;
}

Status await_request(PeerState& s, OpRecord& rec, const std::shared_ptr<Reply>& reply, Clock::time_point start) {
  Status status = s.rt->await_op(reply, op_timeout(s), s.config.num_devices, start);
  if (status) {
    record_matched(s, rec, reply->strategy);
  } else {
    (void)record_end(s, rec, status);
  }
  return status;
}

std::shared_ptr<Reply> request(PeerState& s, OpRecord& rec, OpRequestData req, const Tensor& in,
                               const Tensor& out, Status& status, Status local_error) {
  // An op that waited in the arena first has that much less time left.
  const Clock::time_point start = rec.entered ? rec.since : Clock::now();
  auto reply = enter_request(s, rec, std::move(req), in, out, status, std::move(local_error));
  if (reply) status = await_request(s, rec, reply, start);
  return reply;
}

std::shared_ptr<Reply> group_request(PeerState& s, GroupRequestData g, Status& status) {
  g.peer = s.id;
  g.epoch = s.epoch;
  Call call;
  call.group = std::move(g);
  auto reply = call.reply;
  status = s.rt->submit_group(call, op_timeout(s), s.config.num_devices);
  return reply;
}

namespace {
Status run_plan(Reply& r, const std::byte* in, std::byte* out, StepTrace* trace) {
  if (r.device) return r.device->join();  // GPU tensors: the device actors run it (avg included)
  if (r.copied) return Status::ok();      // a send/recv pair: the data moved when it was paired
  OpPlan& plan = *r.plan;
  if (r.nccl) {  // GPU tensors across nodes: the (empty) plan concludes the announcements, then NCCL
    WorkBuffer none = WorkBuffer::bind(plan.kind(), r.rank, plan.size(), plan.root(), 0, plan.dtype(), nullptr, nullptr);
    if (auto s = plan.run(r.rank, none, trace); !s) return s;
    return r.nccl->join();
  }
  WorkBuffer work = WorkBuffer::bind(plan.kind(), r.rank, plan.size(), plan.root(), plan.count(),
                                     plan.dtype(), in, out);
  if (auto s = plan.run(r.rank, work, trace); !s) return s;
  if (plan.redop() == ReduceOp::avg && out != nullptr && holds_reduction(plan.kind(), r.rank, plan.root()))
    divide_by(plan.dtype(), out, plan.count(), static_cast<std::size_t>(plan.size()));
  return Status::ok();
}
} // namespace

void record_begin(PeerState& s, OpRecord& rec, const OpRequestData& req, const Tensor& data) {
  if (!s.flight && !s.trace) return;
  const bool p2p = req.op.kind == OpKind::send || req.op.kind == OpKind::recv;
  FlightOp op;
  op.peer = s.offset + s.id;
  op.rank = s.rank;
  op.op.kind = req.op.kind;
  op.op.group = s.group;
  op.op.seq = p2p ? kNoSeq : req.op.seq;
  op.op.redop = req.op.redop;
  op.op.root = req.op.root;
  op.other = req.other;
  op.tag = req.tag;
  op.data = &data;
  if (s.trace) s.trace->begin(rec.span.emplace(), op);
  rec.flight_ticket = s.flight ? s.flight->begin(s.id, op) : 0;
}

void record_matched(PeerState& s, OpRecord& rec, const RunStrategy& strategy) {
  s.last_strategy.store(pack(strategy), std::memory_order_relaxed);
  if (rec.flight_ticket) s.flight->matched(s.id, rec.flight_ticket, strategy);
  if (rec.span) s.trace->matched(*rec.span, strategy);
}

Status record_end(PeerState& s, OpRecord& rec, Status st) {
  if (rec.flight_ticket) s.flight->end(s.id, rec.flight_ticket, st);
  rec.flight_ticket = 0;
  if (rec.span) s.trace->end(*rec.span, st);
  return st;
}

Status execute(PeerState& s, OpRecord& rec, Reply& r, const std::byte* in, std::byte* out) {
  return record_end(s, rec, run_plan(r, in, out, s.trace));
}

Status fail_op(PeerState& s, OpRequestData req, Status why) {
  OpRecord rec;
  return fail_op(s, rec, std::move(req), std::move(why));
}

Status fail_op(PeerState& s, OpRecord& rec, OpRequestData req, Status why) {
  Status st;
  auto reply = request(s, rec, std::move(req), Tensor(), Tensor(), st, std::move(why));
  if (!st) return st;
  return execute(s, rec, *reply, nullptr, nullptr);  // across nodes: concludes the op with the other nodes
}

namespace {
// Every failed op says so at warn (op), with the peer's global rank, group and sequence number.
Status logged(const PeerState& s, OpKind kind, uint64_t seq, Status st) {
  if (!st)
    CHORUS_LOG(warn, op,
               (LogWhere{-1, static_cast<int64_t>(s.offset + s.id), static_cast<int64_t>(s.group), static_cast<int64_t>(seq)}),
               std::string(to_string(kind)) + " failed: " + st.to_string());
  return st;
}
} // namespace

PlanQuery host_query(const PeerState& s, OpKind kind) {
  PlanQuery q;
  q.kind = kind;
  q.group = s.group;
  q.topology.shared_memory = !s.global;
  if (s.arena && !s.finished && !s.destroyed && s.arena->arena.usable()) {
    q.arena_slot = s.arena->arena.slot_bytes();
    q.arena_across_nodes = s.arena->across_nodes;
  }
  return q;
}

namespace {
// The planner's question for this peer's op (strategies/planner.hpp): what it is, whether an arena
// is open to it, and for GPU tensors across nodes, which nodes have GPUs.
PlanQuery query_of(const PeerState& s, const OpRequestData& req, const Tensor& in, const Tensor& out) {
  PlanQuery q = host_query(s, req.op.kind);
  q.redop = req.op.redop;
  q.root = req.op.root;
  q.on_device = on_device(in, out);
  q.root_from_data = req.root_from_data;
  if (q.on_device && s.global) {
    q.dtype = (in.defined() ? in : out).dtype();
    q.nccl_serves = gpu::nccl_serves(q.kind, q.dtype, q.redop);
    q.topology = s.global->gpu_topology(s.members);
  }
  return q;
}
} // namespace

Status ordinary(PeerState& s, OpRecord& rec, OpRequestData req, const Tensor& in, const Tensor& out) {
  Status st;
  const OpKind kind = req.op.kind;
  const uint64_t seq = rec.entered ? req.op.seq : s.seq.load();
  auto reply = request(s, rec, std::move(req), in, out, st);
  if (!st) return logged(s, kind, seq, st);
  return logged(s, kind, seq, execute(s, rec, *reply, bytes(in), bytes(out.defined() ? out : in)));
}

Status collective(PeerState* s, OpRequestData req, const Tensor& in, const Tensor& out) {
  if (!s) return no_peer();
  const OpKind kind = req.op.kind;
  OpRecord rec;
  if (Status why = start_failure(); !why.is_ok()) return logged(*s, kind, s->seq.load(), fail_op(*s, rec, std::move(req), why));
  const PlanQuery q = query_of(*s, req, in, out);
  const Route route = plan_route(s->config, q);
  // First the meeting where the planner says so: the world's small host ops in the arena; GPU
  // tensors of the peers of one process (a lead runs the op where they all lie on one GPU), or of
  // processes sharing a GPU (one lead's plan over every buffer).
  std::optional<Status> done;
  switch (route.meet) {
    case RunStrategy::Path::arena: done = arena_collective(*s, rec, req, in, out); break;
    case RunStrategy::Path::device: done = gpu_local_arena_collective(*s, rec, req, in, out); break;
    case RunStrategy::Path::cuda_ipc: done = gpu_arena_collective(*s, rec, req, in, out); break;
    default: break;
  }
  if (done) return logged(*s, kind, req.op.seq, *done);
  if (route.staged) {  // GPU tensors across nodes that NCCL does not take: through host memory
    const uint64_t seq = rec.entered ? req.op.seq : s->seq.load();
    const auto k = static_cast<std::size_t>(kind);
    const StrategyChoice choice = k < s->config.global.size() ? s->config.global[k] : StrategyChoice{};
    if (!choice.is_auto && choice.fixed.algorithm == Algorithm::nccl)
      CHORUS_LOG(info, cuda,
                 (LogWhere{-1, static_cast<int64_t>(s->offset + s->id), static_cast<int64_t>(s->group),
                           static_cast<int64_t>(seq)}),
                 std::string(to_string(kind)) + " of " + std::string(to_string(q.dtype)) + " with " +
                     std::string(to_string(req.op.redop)) + ": NCCL cannot serve it; through host memory");
    return logged(*s, kind, seq, staged_collective(s, rec, std::move(req), in, out));
  }
  return ordinary(*s, rec, std::move(req), in, out);
}

} // namespace chorus::peer_impl
