// The local server core: launching an op of this process whose peers have all called: a host
// schedule or a GPU run, and the plan of a matched send/recv pair.
#include "actors/local_server/server_core.hpp"

#include "actors/global_client/global_client.hpp"

namespace chorus {

Status LocalServerCore::local_errors(const PendingOp& op) const {
  for (const auto& a : op.arrivals)
    if (a && !a->call.local_error)
      return {a->call.local_error.code(), "peer " + std::to_string(global_ ? global_->offset() + a->req.peer : a->req.peer) +
                                              " could not take part: " + a->call.local_error.message()};
  return Status::ok();
}

std::shared_ptr<const CompiledSchedule> LocalServerCore::schedule_for(const ScheduleParams& p) {
  auto key = std::make_tuple(static_cast<int>(p.op), static_cast<int>(p.strategy.algorithm),
                             p.strategy.arity, p.n, p.root, p.count, p.elem_size);
  auto it = schedule_cache_.find(key);
  if (it != schedule_cache_.end()) return it->second;
  if (schedule_cache_.size() >= 512) schedule_cache_.clear();  // bound memory; rebuilding is cheap
  auto cs = CompiledSchedule::compile(make_schedule(p));
  schedule_cache_.emplace(key, cs);
  return cs;
}

void LocalServerCore::launch(const OpKey& key, PendingOp& op) {
  if (global_) return launch_global(key, op);
  const uint64_t seq = key.second;
  const int n = static_cast<int>(op.arrivals.size());
  std::vector<const OpRequestData*> reqs;
  for (auto& a : op.arrivals) reqs.push_back(&a->req);
  const std::string label = op_label(op.kind, seq);
  OpShape shape{};
  Status s = local_errors(op);
  if (s) s = check_agreement(reqs, n, shape);
  std::shared_ptr<OpPlan> plan;
  std::shared_ptr<DeviceRun> device;
  RunStrategy strategy;
  bool gpu = false;  // checked without copying tensors: host ops are the hot path
  for (auto& a : op.arrivals) gpu = gpu || on_device(a->call.input, a->call.output);
  if (s && gpu) {
    std::vector<PeerTensors> tensors;
    for (auto& a : op.arrivals) tensors.push_back({a->call.input, a->call.output, a->req.peer});
    s = make_device_run(tensors, shape, config_->local[static_cast<std::size_t>(shape.kind)], deadline(), label, device);
    if (s) strategy = device->strategy();
  } else if (s) {
    try {
      const std::size_t esize = dtype_size(shape.dtype);
      Topology t;
      t.peers = n;
      strategy = tune(*config_, shape.kind, shape.dtype, shape.count, t);
      auto cs = schedule_for({shape.kind, strategy.strategy, n, shape.root, shape.count, esize});
      plan = std::make_shared<OpPlan>(shape.kind, shape.dtype, shape.redop, n, shape.root, shape.count,
                                      std::move(cs), deadline(), label);
    } catch (const std::exception& e) {
      s = Status(Errc::internal, e.what());
    }
  }
  for (int p = 0; p < n; ++p) {
    Reply& r = *op.arrivals[p]->call.reply;
    if (!s) {
      r.complete(Status(s.code(), label + ": " + s.message()));
      continue;
    }
    r.plan = plan;
    r.device = device;
    r.strategy = strategy;
    r.rank = p;
    r.out_dtype = shape.out_dtype;
    r.out_shape = shape.out_shape;
    r.complete(Status::ok());
  }
}

void LocalServerCore::launch_pair(const P2PKey& key, Arrival snd, Arrival rcv) {
  const auto& [gid, src, dst, tag] = key;
  const std::string label = "send/recv " + std::to_string(src) + "->" + std::to_string(dst) + " tag " + std::to_string(tag);
  Status s;
  if (snd.req.input.dtype != rcv.req.output.dtype)
    s = {Errc::dtype_mismatch, label + ": sender has " + snd.req.input.describe() + ", receiver " + rcv.req.output.describe()};
  else if (snd.req.input.numel() != rcv.req.output.numel())
    s = {Errc::shape_mismatch, label + ": sender has " + snd.req.input.describe() + ", receiver " + rcv.req.output.describe()};
  if (!s) {
    snd.call.reply->complete(s);
    rcv.call.reply->complete(s);
    return;
  }
  const std::size_t count = snd.req.input.numel();
  if (on_device(snd.call.input, rcv.call.output)) {
    std::vector<PeerTensors> tensors{{snd.call.input, snd.call.input, src}, {Tensor(), rcv.call.output, dst}};
    OpShape shape{OpKind::send, snd.req.input.dtype, ReduceOp::sum, 0, count, snd.req.input.dtype, {}, {}};
    std::shared_ptr<DeviceRun> device;
    s = make_device_run(tensors, shape, config_->local[static_cast<std::size_t>(OpKind::broadcast)], deadline(),
                        label, device);
    if (!s) s = Status(s.code(), label + ": " + s.message());
    for (Arrival* a : {&snd, &rcv}) {
      a->call.reply->device = device;
      a->call.reply->strategy = RunStrategy::of(RunStrategy::Path::p2p);
      a->call.reply->rank = a == &snd ? 0 : 1;
      a->call.reply->complete(s);
    }
    return;
  }
  // Two-peer plan: rank 0 sends its buffer, rank 1 copies it straight into its own.
  std::vector<Program> progs(2);
  progs[0].push_back(Round{{Step{StepKind::send, 1, 0, count}}});
  progs[1].push_back(Round{{Step{StepKind::recv_copy, 0, 0, count}}});
  auto plan = std::make_shared<OpPlan>(OpKind::broadcast, snd.req.input.dtype, ReduceOp::sum, 2, 0, count,
                                       CompiledSchedule::compile(std::move(progs)), deadline(), label);
  for (Arrival* a : {&snd, &rcv}) a->call.reply->strategy = RunStrategy::of(RunStrategy::Path::p2p);
  snd.call.reply->plan = plan;
  snd.call.reply->rank = 0;
  rcv.call.reply->plan = plan;
  rcv.call.reply->rank = 1;
  snd.call.reply->complete(Status::ok());
  rcv.call.reply->complete(Status::ok());
}

} // namespace chorus
