// The local server core: launching an op whose peers have all called. Under the lock it is taken
// out of the pending ops with what its launch needs (prepare_launch); after unlocking it becomes a
// host schedule's plan or a GPU run for every peer of this process (launch), or goes to the global
// client (launch_global.cpp). A matched send/recv pair is copied there and then, or becomes a two-peer
// plan (launch_pair).
#include "actors/local_server/server_core.hpp"

#include <cstring>

#include "actors/global_client/global_client.hpp"
#include "strategies/planner.hpp"

namespace chorus {

Status LocalServerCore::local_error_of(const Arrival& a, uint32_t offset) {
  if (a.call.local_error) return Status::ok();
  return {a.call.local_error.code(),
          "peer " + std::to_string(offset + a.req.peer) + " could not take part: " + a.call.local_error.message()};
}

Status LocalServerCore::local_errors(const std::vector<std::optional<Arrival>>& arrivals, uint32_t offset) {
  for (const auto& a : arrivals)
    if (a)
      if (Status e = local_error_of(*a, offset); !e) return e;
  return Status::ok();
}

namespace {
// `least`, or `t` where it is a bound (not zero) and shorter.
void keep_shorter(std::chrono::milliseconds& least, std::chrono::milliseconds t) {
  if (t.count() > 0 && (least.count() == 0 || t < least)) least = t;
}
} // namespace

std::chrono::milliseconds LocalServerCore::shortest_timeout(std::initializer_list<const Call*> calls) {
  std::chrono::milliseconds least{0};
  for (const Call* c : calls) keep_shorter(least, c->timeout);
  return least;
}

std::chrono::milliseconds LocalServerCore::shortest_timeout(const std::vector<std::optional<Arrival>>& arrivals,
                                                            bool given_only) {
  std::chrono::milliseconds least{0};
  for (const auto& a : arrivals)
    if (a && (a->call.timeout_given || !given_only)) keep_shorter(least, a->call.timeout);
  return least;
}

bool LocalServerCore::prepare_launch(const OpKey& key, PendingOp& op, Launch& l) {
  l.key = key;
  l.kind = op.kind;
  l.config = config_;
  l.generation = epoch_;
  l.global = global_;
  if (global_ && key.first != 0) {
    auto g = groups_.find(key.first);
    if (g == groups_.end()) {
      for (auto& a : op.arrivals)
        a->call.reply->complete({Errc::invalid_argument, "group " + std::to_string(key.first) + " was destroyed"});
      return false;
    }
    l.members = g->second.members;
  }
  l.n = static_cast<int>(!global_ ? op.arrivals.size() : l.members.empty() ? global_->total_peers() : l.members.size());
  std::vector<const OpRequestData*> reqs;
  for (auto& a : op.arrivals) reqs.push_back(&a->req);
  l.status = local_errors(op.arrivals, global_ ? global_->offset() : 0);
  if (l.status) l.status = check_agreement(reqs, l.n, l.shape);
  // Checked without copying tensors: host ops are the hot path.
  for (auto& a : op.arrivals) l.gpu = l.gpu || on_device(a->call.input, a->call.output);
  l.shape.on_device = l.gpu;
  if (l.status && !l.gpu && !global_) {
    // In one process the planner's answer is cheap; the cached schedule is the usual case.
    PlanQuery q(l.shape);
    q.topology.peers = l.n;
    l.strategy = plan_path(*config_, q);
    auto it = schedule_cache_.find(FlatKey{static_cast<int>(l.shape.kind), static_cast<int>(l.strategy.strategy.algorithm),
                                           l.strategy.strategy.arity, l.n, l.shape.root, l.shape.count,
                                           dtype_size(l.shape.dtype)});
    if (it != schedule_cache_.end()) l.schedule = it->second;
  }
  l.arrivals = std::move(op.arrivals);
  return true;
}

void LocalServerCore::launch(Launch& l) {
  if (l.global) return launch_global(l);
  const Config& config = *l.config;
  const int n = l.n;
  const OpShape& shape = l.shape;
  const std::string label = op_label(l.kind, l.key.second);
  Status s = l.status;
  std::shared_ptr<OpPlan> plan;
  std::shared_ptr<DeviceRun> device;
  RunStrategy strategy = l.strategy;
  const auto bound = shortest_timeout(l.arrivals);
  if (s && l.gpu) {
    if (launch_hook_) launch_hook_("device");
    std::vector<PeerTensors> tensors;
    for (auto& a : l.arrivals) tensors.push_back({a->call.input, a->call.output, a->req.peer});
    s = make_device_run(tensors, shape, config.local[static_cast<std::size_t>(shape.kind)], deadline(config, bound), label,
                        device);
    if (s) strategy = device->strategy();
  } else if (s) {
    if (launch_hook_) launch_hook_("host");
    try {
      auto cs = l.schedule;
      if (!cs) {  // compiled without the lock; another thread may have cached the same meanwhile
        const ScheduleParams p = plan_schedule(shape, n, strategy);
        cs = CompiledSchedule::compile(make_schedule(p));
        PlanQuery q(shape);
        q.topology.peers = n;
        log_plan(config, q, LogWhere{-1, -1, l.key.first, static_cast<int64_t>(l.key.second)}, label);
        std::lock_guard<std::mutex> lk(mu_);
        if (schedule_cache_.size() >= 512) schedule_cache_.clear();  // bound memory; rebuilding is cheap
        schedule_cache_.emplace(FlatKey{static_cast<int>(p.op), static_cast<int>(p.strategy.algorithm),
                                        p.strategy.arity, p.n, p.root, p.count, p.elem_size},
                                cs);
      }
      plan = std::make_shared<OpPlan>(shape, n, std::move(cs), deadline(config, bound), label);
    } catch (const std::exception& e) {
      s = Status(Errc::internal, e.what());
    }
  }
  for (int p = 0; p < n; ++p) {
    Reply& r = *l.arrivals[p]->call.reply;
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

void LocalServerCore::launch_pair(PairLaunch& pl) {
  Arrival& snd = pl.snd;
  Arrival& rcv = pl.rcv;
  const auto& [gid, src, dst, tag] = pl.key;
  // Made where it is used (errors, a device run, a plan): a pair copied at once needs none.
  auto label = [&] {
    return "send/recv " + std::to_string(src) + "->" + std::to_string(dst) + " tag " + std::to_string(tag);
  };
  rcv.call.reply->source = src;  // what a receive from any source took
  // A side that could not take part (OpOptions::stream's earlier work not done): neither moves data.
  const uint32_t offset = global_ ? global_->offset() : 0;
  Status s = local_error_of(snd, offset);
  if (s) s = local_error_of(rcv, offset);
  if (!s)
    s = {s.code(), label() + ": " + s.message()};
  else if (snd.req.input.dtype != rcv.req.output.dtype)
    s = {Errc::dtype_mismatch, label() + ": sender has " + snd.req.input.describe() + ", receiver " + rcv.req.output.describe()};
  else if (snd.req.input.numel() != rcv.req.output.numel())
    s = {Errc::shape_mismatch, label() + ": sender has " + snd.req.input.describe() + ", receiver " + rcv.req.output.describe()};
  if (!s) {
    snd.call.reply->complete(s);
    rcv.call.reply->complete(s);
    return;
  }
  if (launch_hook_) launch_hook_("pair");
  const std::size_t count = snd.req.input.numel();
  const RunStrategy p2p = RunStrategy::of(RunStrategy::Path::p2p);
  if (on_device(snd.call.input, rcv.call.output)) {
    std::vector<PeerTensors> tensors{{snd.call.input, snd.call.input, src}, {Tensor(), rcv.call.output, dst}};
    OpShape shape;
    shape.kind = OpKind::send, shape.dtype = shape.out_dtype = snd.req.input.dtype, shape.count = count;
    shape.on_device = true;
    std::shared_ptr<DeviceRun> device;
    s = make_device_run(tensors, shape, pl.config->local[static_cast<std::size_t>(OpKind::broadcast)],
                        deadline(*pl.config, shortest_timeout({&snd.call, &rcv.call})), label(), device);
    if (!s) s = Status(s.code(), label() + ": " + s.message());
    for (Arrival* a : {&snd, &rcv}) {
      a->call.reply->device = device;
      a->call.reply->strategy = p2p;
      a->call.reply->rank = a == &snd ? 0 : 1;
      a->call.reply->complete(s);
    }
    return;
  }
  const std::size_t bytes = count * dtype_size(snd.req.input.dtype);
  std::shared_ptr<OpPlan> plan;  // none: copied here
  if (plan_pair_copy_at_pairing(bytes)) {
    // The second of the two to arrive copies the sender's buffer into the receiver's here (both
    // are the callers': the sender waits for this answer, the receive was posted with its buffer).
    // A side whose wait ran out meanwhile finds neither half left to expire (they were paired
    // under the lock) and waits RuntimeImpl::grace for this answer before it gives up.
    if (bytes > 0) std::memmove(rcv.call.output.data(), snd.call.input.data(), bytes);
  } else {
    // Two-peer plan: rank 0 sends its buffer, rank 1 copies it straight into its own.
    std::vector<Program> progs(2);
    progs[0].push_back(Round{{Step{StepKind::send, 1, 0, count}}});
    progs[1].push_back(Round{{Step{StepKind::recv_copy, 0, 0, count}}});
    OpDesc copy;  // the pair as a broadcast from its sender
    copy.kind = OpKind::broadcast, copy.group = snd.req.op.group, copy.dtype = snd.req.input.dtype, copy.count = count;
    plan = std::make_shared<OpPlan>(copy, 2, CompiledSchedule::compile(std::move(progs)),
                                    deadline(*pl.config, shortest_timeout({&snd.call, &rcv.call})), label());
  }
  for (Arrival* a : {&snd, &rcv}) {
    a->call.reply->plan = plan;
    a->call.reply->copied = !plan;
    a->call.reply->strategy = p2p;
    a->call.reply->rank = a == &snd ? 0 : 1;
    a->call.reply->complete(Status::ok());
  }
}

} // namespace chorus
