#include <chorus/grad_sync.hpp>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <unordered_set>

#include "cuda/staging.hpp"
#include "strategies/reduce_kernels.hpp"

namespace chorus {

namespace {

std::string describe_spec(const int64_t* e) {
  if (e[0] == -1 && e[1] == -1) return "no parameter";
  std::ostringstream os;
  os << "parameter " << static_cast<uint64_t>(e[0]) << " ("
     << to_string(static_cast<DType>(e[1])) << " x " << e[2] << ", " << e[3]
     << " contribution(s)/step)";
  return os.str();
}

std::string id_list(const std::vector<uint64_t>& ids) {
  std::string s;
  for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s;
}

}  // namespace

std::vector<BucketPlan> plan_buckets(const std::vector<ParamSpec>& params, std::size_t bucket_bytes) {
  std::vector<BucketPlan> out;
  for (const auto& p : params) {
    const std::size_t pb = p.numel * dtype_size(p.dtype);
    bool open_new = out.empty() || out.back().dtype != p.dtype ||
                    (out.back().numel > 0 && out.back().bytes() + pb > bucket_bytes);
    if (open_new) {
      out.emplace_back();
      out.back().dtype = p.dtype;
    }
    auto& b = out.back();
    b.param_ids.push_back(p.id);
    b.offsets.push_back(b.numel);
    b.numel += p.numel;
  }
  return out;
}

GradientSync::GradientSync(Peer& peer, GradSyncOptions options)
    : peer_(&peer), opts_(options), comm_([this] { comm_loop(); }) {}

GradientSync::~GradientSync() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  comm_.join();
}

Status GradientSync::set_peer(Peer& peer) {
  std::lock_guard lk(mu_);
  if (step_started_ || in_flight_)
    return {Errc::invalid_argument, "set_peer: a step is in progress (call sync() first)"};
  peer_ = &peer;
  return Status::ok();
}

Status GradientSync::register_params(std::vector<ParamSpec> params) {
  {
    std::lock_guard lk(mu_);
    if (step_started_)
      return {Errc::invalid_argument, "register_params: a step is in progress (call sync() first)"};
  }
  // Local checks first; their outcome travels in the header so every device fails together.
  std::string local_error;
  if (opts_.op != ReduceOp::sum && opts_.op != ReduceOp::avg)
    local_error = "reduce op must be sum or avg, not " + std::string(to_string(opts_.op));
  {
    std::unordered_set<uint64_t> seen;
    for (const auto& p : params) {
      if (!local_error.empty()) break;
      if (!seen.insert(p.id).second)
        local_error = "duplicate parameter id " + std::to_string(p.id);
      else if (p.numel == 0)
        local_error = "parameter " + std::to_string(p.id) + " has 0 elements";
      else if (p.contributions_per_step == 0)
        local_error = "parameter " + std::to_string(p.id) + " has contributions_per_step 0";
    }
  }
  // The fusion buffers live where the gradients do (GPU memory with options.device = cuda). They
  // are made before the exchange so that a device that cannot have them fails every device.
  auto plan = plan_buckets(params, opts_.bucket_bytes);
  std::vector<Tensor> buffers;
  std::string alloc_error;
  if (local_error.empty()) try {
      for (const auto& b : plan)
        buffers.push_back(Tensor::zeros(b.dtype, {static_cast<int64_t>(b.numel)}, opts_.device));
    } catch (const std::exception& e) {
      alloc_error = e.what();
    }
  const uint32_t n = peer_->size();
  const PeerId me = peer_->id();
  // Header: list length, bucket_bytes, op, verdict (1 ok, 0 bad list, 2 no fusion buffers).
  Tensor hdr = Tensor::from(std::vector<int64_t>{static_cast<int64_t>(params.size()),
                                                 static_cast<int64_t>(opts_.bucket_bytes),
                                                 static_cast<int64_t>(opts_.op),
                                                 !local_error.empty() ? 0 : !alloc_error.empty() ? 2 : 1});
  Tensor all_hdr = Tensor::zeros(DType::i64, {static_cast<int64_t>(4 * n)});
  if (Status s = peer_->all_gather(hdr, all_hdr); !s)
    return {s.code(), "register_params: exchanging parameter lists: " + s.message()};
  const int64_t* H = all_hdr.data_as<int64_t>();
  std::vector<uint32_t> rejected, no_buffers;
  int64_t max_n = 0;
  for (uint32_t d = 0; d < n; ++d) {
    if (H[4 * d + 3] == 0) rejected.push_back(d);
    if (H[4 * d + 3] == 2) no_buffers.push_back(d);
    max_n = std::max(max_n, H[4 * d]);
  }
  if (rejected.empty() && !no_buffers.empty()) {
    std::string msg = "register_params: device(s)";
    for (std::size_t i = 0; i < no_buffers.size(); ++i) msg += (i ? ", " : " ") + std::to_string(no_buffers[i]);
    msg += " could not allocate their fusion buffers";
    if (!alloc_error.empty()) msg += " (device " + std::to_string(me) + ": " + alloc_error + ")";
    return {Errc::device_error, msg};
  }
  if (!rejected.empty()) {
    std::string msg = "register_params: device(s)";
    for (std::size_t i = 0; i < rejected.size(); ++i) msg += (i ? ", " : " ") + std::to_string(rejected[i]);
    msg += " rejected their parameter list";
    if (!local_error.empty()) msg += " (device " + std::to_string(me) + ": " + local_error + ")";
    return {Errc::invalid_argument, msg};
  }
  for (uint32_t d = 1; d < n; ++d) {
    if (H[4 * d + 1] != H[1] || H[4 * d + 2] != H[2])
      return {Errc::invalid_argument,
              "register_params: device " + std::to_string(d) + " uses bucket_bytes " +
                  std::to_string(H[4 * d + 1]) + " and op " +
                  std::string(to_string(static_cast<ReduceOp>(H[4 * d + 2]))) + ", device 0 uses " +
                  std::to_string(H[1]) + " and " + std::string(to_string(static_cast<ReduceOp>(H[2])))};
  }
  // Exchange the full lists, padded to the longest, and compare entry by entry with device 0's.
  std::vector<int64_t> mine(4 * max_n, -1);
  for (std::size_t i = 0; i < params.size(); ++i) {
    mine[4 * i] = static_cast<int64_t>(params[i].id);
    mine[4 * i + 1] = static_cast<int64_t>(params[i].dtype);
    mine[4 * i + 2] = static_cast<int64_t>(params[i].numel);
    mine[4 * i + 3] = static_cast<int64_t>(params[i].contributions_per_step);
  }
  if (max_n > 0) {
    Tensor in = Tensor::from(mine);
    Tensor all = Tensor::zeros(DType::i64, {static_cast<int64_t>(4 * max_n * n)});
    if (Status s = peer_->all_gather(in, all); !s)
      return {s.code(), "register_params: exchanging parameter lists: " + s.message()};
    const int64_t* A = all.data_as<int64_t>();
    for (int64_t i = 0; i < max_n; ++i) {
      const int64_t* ref = A + 4 * i;
      for (uint32_t d = 1; d < n; ++d) {
        const int64_t* e = A + 4 * (static_cast<int64_t>(d) * max_n + i);
        if (std::equal(e, e + 4, ref)) continue;
        const int64_t* named = ref[0] != -1 ? ref : e;
        return {Errc::invalid_argument,
                "register_params: parameter sets differ at parameter id " +
                    std::to_string(static_cast<uint64_t>(named[0])) + " (index " + std::to_string(i) +
                    "): device 0 has " + describe_spec(ref) + ", device " + std::to_string(d) +
                    " has " + describe_spec(e)};
      }
    }
  }

  std::lock_guard lk(mu_);
  buckets_ = std::move(plan);
  buffers_ = std::move(buffers);
  pending_.clear();
  index_.clear();
  params_.clear();
  for (std::size_t i = 0; i < params.size(); ++i) index_[params[i].id] = i;
  params_.resize(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) params_[i].spec = params[i];
  for (std::size_t k = 0; k < buckets_.size(); ++k) {
    const auto& b = buckets_[k];
    for (std::size_t j = 0; j < b.param_ids.size(); ++j) {
      auto& ps = params_[index_[b.param_ids[j]]];
      ps.bucket = k;
      ps.offset = b.offsets[j];
    }
  }
  registered_ = true;
  reset_step_locked();
  cv_.notify_all();
  return Status::ok();
}

Status GradientSync::submit(uint64_t id, const Tensor& grad) {
  std::unique_lock lk(mu_);
  if (!registered_) return {Errc::invalid_argument, "submit: register_params was not called"};
  auto it = index_.find(id);
  if (it == index_.end())
    return {Errc::invalid_argument, "submit: unknown parameter id " + std::to_string(id)};
  auto& ps = params_[it->second];
  if (grad.dtype() != ps.spec.dtype)
    return {Errc::dtype_mismatch, "submit: parameter " + std::to_string(id) + " is " +
                                      std::string(to_string(ps.spec.dtype)) + ", gradient is " +
                                      grad.describe()};
  if (grad.numel() != ps.spec.numel || (grad.data() == nullptr && ps.spec.numel > 0))
    return {Errc::shape_mismatch, "submit: parameter " + std::to_string(id) + " has " +
                                      std::to_string(ps.spec.numel) + " elements, gradient is " +
                                      grad.describe()};
  if (ps.submitted >= ps.spec.contributions_per_step)
    return {Errc::invalid_argument,
            "submit: parameter " + std::to_string(id) + " submitted twice in one step (" +
                std::to_string(ps.submitted + 1) + " submissions, contributions_per_step = " +
                std::to_string(ps.spec.contributions_per_step) + ")"};
  if (grad.device() != opts_.device)
    return {Errc::device_mismatch, "submit: parameter " + std::to_string(id) + ": the sync runs on " +
                                       opts_.device.str() + ", the gradient is " + grad.describe()};
  step_started_ = true;
  Tensor slot = slot_of(ps);
  if (ps.submitted == 0) {
    try {
      slot.copy_from(grad);
    } catch (const std::exception& e) {
      return {Errc::device_error, std::string("submit: ") + e.what()};
    }
  } else if (Status s = accumulate(slot, grad); !s) {
    return s;
  }
  if (opts_.copy_back) ps.targets.push_back(grad);
  if (++ps.submitted == ps.spec.contributions_per_step && --pending_[ps.bucket] == 0) {
    lk.unlock();
    cv_.notify_all();
  }
  return Status::ok();
}

void GradientSync::comm_loop() {
  std::unique_lock lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] {
      return stop_ || (registered_ && step_error_.is_ok() && next_bucket_ < buckets_.size() &&
                       pending_[next_bucket_] == 0);
    });
    if (stop_) return;
    const std::size_t k = next_bucket_;
    Tensor buf = buffers_[k];
    in_flight_ = true;
    Peer* peer = peer_;  // set_peer changes it only between steps, under the lock
    lk.unlock();
    Status s = peer->all_reduce(buf, opts_.op);
    lk.lock();
    in_flight_ = false;
    if (s) {
      ++next_bucket_;
    } else {
      step_error_ = Status(s.code(), "gradient sync: bucket " + std::to_string(k) + " (parameters " +
                                         id_list(buckets_[k].param_ids) + "): " + s.message());
    }
    cv_.notify_all();
  }
}

std::string GradientSync::missing_params_locked() const {
  std::string s;
  std::size_t shown = 0, total = 0;
  for (const auto& ps : params_) {
    if (ps.submitted >= ps.spec.contributions_per_step) continue;
    ++total;
    if (shown < 16) {
      s += (shown ? ", " : "") + std::to_string(ps.spec.id) + " (" + std::to_string(ps.submitted) +
           " of " + std::to_string(ps.spec.contributions_per_step) + " contributions)";
      ++shown;
    }
  }
  if (total > shown) s += " and " + std::to_string(total - shown) + " more";
  return s;
}

void GradientSync::reset_step_locked() {
  for (auto& ps : params_) {
    ps.submitted = 0;
    ps.targets.clear();
  }
  pending_.assign(buckets_.size(), 0);
  for (std::size_t k = 0; k < buckets_.size(); ++k) pending_[k] = buckets_[k].param_ids.size();
  next_bucket_ = 0;
  step_error_ = Status::ok();
  step_started_ = false;
}

Status GradientSync::sync() {
  std::unique_lock lk(mu_);
  if (!registered_) return {Errc::invalid_argument, "sync: register_params was not called"};
  const auto deadline = std::chrono::steady_clock::now() + opts_.timeout;
  for (;;) {
    if (!step_error_.is_ok()) {
      Status err = step_error_;
      reset_step_locked();
      return err;
    }
    if (next_bucket_ == buckets_.size()) break;
    const bool next_ready = pending_[next_bucket_] == 0;
    if (in_flight_ || next_ready) {
      // The collective bounds an all_reduce in flight by its own timeout; wait for it.
      cv_.wait(lk);
      continue;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      Status err(Errc::timeout, "gradient sync: device " + std::to_string(peer_->id()) +
                                    " never submitted parameter(s) " + missing_params_locked() +
                                    " within " + std::to_string(opts_.timeout.count()) + " ms");
      reset_step_locked();
      return err;
    }
    cv_.wait_until(lk, deadline);
  }
  if (opts_.copy_back) {
    for (auto& ps : params_) {
      const Tensor src = slot_of(ps);
      for (auto& t : ps.targets) {
        try {
          t.copy_from(src);
        } catch (const std::exception& e) {
          reset_step_locked();
          return {Errc::device_error, std::string("sync: copying back: ") + e.what()};
        }
      }
    }
  }
  reset_step_locked();
  return Status::ok();
}

Result<Tensor> GradientSync::reduced(uint64_t id) const {
  std::lock_guard lk(mu_);
  auto it = index_.find(id);
  if (it == index_.end())
    return Status(Errc::invalid_argument, "reduced: unknown parameter id " + std::to_string(id));
  return slot_of(params_[it->second]);
}

Tensor GradientSync::slot_of(const ParamState& ps) const {
  char* p = static_cast<char*>(buffers_[ps.bucket].data()) + ps.offset * dtype_size(ps.spec.dtype);
  return Tensor::borrow(p, ps.spec.dtype, {static_cast<int64_t>(ps.spec.numel)}, opts_.device);
}

int GradientSync::bucket_of(uint64_t id) const {
  std::lock_guard lk(mu_);
  auto it = index_.find(id);
  return it == index_.end() ? -1 : static_cast<int>(params_[it->second].bucket);
}

}  // namespace chorus
