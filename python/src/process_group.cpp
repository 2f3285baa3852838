#include "process_group.hpp"

#include <string>

#include <ATen/ATen.h>

#include "errors.hpp"
#include "torch_tensor.hpp"
#include "work.hpp"

namespace chorus::python {

namespace {

// Point-to-point tags of torch's callers are 32-bit; chorus's own exchanges take the top half.
constexpr uint64_t kExchangeTag = uint64_t{1} << 63;

ReduceOp reduce_op_of(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return ReduceOp::sum;
    case c10d::ReduceOp::AVG: return ReduceOp::avg;
    case c10d::ReduceOp::PRODUCT: return ReduceOp::prod;
    case c10d::ReduceOp::MIN: return ReduceOp::min;
    case c10d::ReduceOp::MAX: return ReduceOp::max;
    case c10d::ReduceOp::BAND: return ReduceOp::band;
    case c10d::ReduceOp::BOR: return ReduceOp::bor;
    case c10d::ReduceOp::BXOR: return ReduceOp::bxor;
    default: invalid("chorus has no reduce op " + std::to_string(static_cast<int>(op.op_)) + " (PREMUL_SUM is NCCL's)");
  }
}

at::Tensor& one(std::vector<at::Tensor>& ts, const char* op) {
  if (ts.size() != 1)
    invalid(std::string(op) + " takes one tensor per process, not " + std::to_string(ts.size()));
  return ts[0];
}

// An op's options: its own timeout (torch's unset, -1, leaves the group's) and the stream it is
// ordered in; made inside the call that hands the op in, whose whole expression it outlives, so
// that the tensor's GPU stays the current device while the op's place in the stream is taken.
struct Ordered {
  OpOptions o;
  std::shared_ptr<void> on_device;
  operator OpOptions() const { return o; }
};
Ordered options_for(std::chrono::milliseconds timeout, const at::Tensor& t) {
  Ordered r{{}, on_device_of(t)};
  if (timeout.count() > 0) r.o.timeout = timeout;
  r.o.stream = stream_of(t);
  return r;
}

// A list of `n` tensors shaped like `like`, for one staged buffer of n blocks.
void check_blocks(const std::vector<at::Tensor>& list, size_t n, const at::Tensor& like, const std::string& what) {
  if (list.size() != n)
    invalid(what + " holds " + std::to_string(list.size()) + " tensors, not one per rank (" + std::to_string(n) + ")");
  for (const auto& t : list) {
    if (t.numel() != like.numel() || t.scalar_type() != like.scalar_type())
      invalid(what + " holds a tensor of " + std::to_string(t.numel()) + " " + c10::toString(t.scalar_type()) +
              " elements where " + std::to_string(like.numel()) + " " + c10::toString(like.scalar_type()) +
              " are expected");
  }
}

// The blocks of `list` as one flat copy (to send), or a flat buffer they are copied out of.
at::Tensor flat_copy(const std::vector<at::Tensor>& list) {
  std::vector<at::Tensor> flat;
  flat.reserve(list.size());
  for (const auto& t : list) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}
std::function<void()> copy_out(at::Tensor flat, std::vector<at::Tensor> list) {
  return [flat = std::move(flat), list = std::move(list)]() mutable {
    at::NoGradGuard raw;  // runs on chorus's thread, where grad mode is on
    int64_t at = 0;
    for (auto& t : list) {
      t.copy_(flat.narrow(0, at, t.numel()).view(t.sizes()));
      at += t.numel();
    }
  };
}

// The copy of a staged result into the caller's tensors. A CPU op's runs once the op is done
// (settle(), on whichever thread sees it first). A CUDA op's is queued now, on the op's stream
// right behind it, as the op is (`o` still holds the tensor's GPU current): work queued after the
// call sees the result, and the copy does not run on whatever stream a later thread has current.
// The Work keeps the buffer.
std::function<void()> then_copy_out(const Ordered& o, at::Tensor flat, std::vector<at::Tensor> list) {
  if (!o.o.stream) return copy_out(std::move(flat), std::move(list));
  copy_out(flat, std::move(list))();
  return [flat] {};
}

// A tensor as chorus takes it (contiguous): itself, or, for a CPU tensor of other strides (a
// transpose, a slice with a step; gloo takes those), a contiguous copy whose result `back` copies
// into it once the op is done (where the op writes it: `writes`).
struct Staged {
  at::Tensor t;
  std::function<void()> back;
};
Staged staged(const at::Tensor& t, bool writes) {
  if (!t.defined() || t.is_contiguous() || t.layout() != c10::kStrided || !t.is_cpu()) return {t, {}};
  at::NoGradGuard raw;  // the tensor is read as memory, as gloo does (autograd has no say)
  at::Tensor c = t.detach().contiguous();
  if (!writes) return {c, {}};
  return {c, [t, c]() mutable {
            at::NoGradGuard raw;  // a parameter's view is written as memory, as gloo does
            t.copy_(c);
          }};
}

// A Work whose result is copied out (`after`) copies it as soon as the op is done, also where
// the caller drops the Work unwaited (as gloo fills its lists).
c10::intrusive_ptr<c10d::Work> work(int rank, c10d::OpType type, std::vector<chorus::Work> parts,
                                    std::vector<at::Tensor> outputs, std::function<void()> after = {}) {
  const bool copies = static_cast<bool>(after);
  auto w = c10::make_intrusive<ChorusWork>(rank, type, std::move(parts), std::move(outputs), std::move(after));
  if (copies) w->settle_when_done();
  return w;
}

} // namespace

ProcessGroupChorus::ProcessGroupChorus(std::shared_ptr<World> world, Peer peer, std::chrono::milliseconds timeout)
    : C10dBase(static_cast<int>(peer.rank()), static_cast<int>(peer.size())),
      world_(std::move(world)),
      peer_(std::move(peer)),
      timeout_(timeout) {}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::broadcast(std::vector<at::Tensor>& tensors,
                                                            const c10d::BroadcastOptions& opts) {
  world_->check_up();
  auto st = staged(one(tensors, "broadcast"), true);
  const at::Tensor& t = st.t;
  Tensor v = view_of(t, "broadcast's tensor");
  std::lock_guard<std::mutex> lk(issue_mu_);
  return work(rank_, c10d::OpType::BROADCAST,
              {peer_.broadcast_async(v, static_cast<PeerId>(opts.rootRank), options_for(op_timeout(opts.timeout), t))}, tensors,
              std::move(st.back));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceOptions& opts) {
  world_->check_up();
  auto st = staged(one(tensors, "allreduce"), true);
  const at::Tensor& t = st.t;
  Tensor v = view_of(t, "allreduce's tensor");
  const ReduceOp op = reduce_op_of(opts.reduceOp);
  std::lock_guard<std::mutex> lk(issue_mu_);
  return work(rank_, c10d::OpType::ALLREDUCE, {peer_.all_reduce_async(v, op, options_for(op_timeout(opts.timeout), t))}, tensors,
              std::move(st.back));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                      const c10d::AllreduceCoalescedOptions& opts) {
  world_->check_up();
  std::vector<Tensor> views;
  for (size_t i = 0; i < tensors.size(); ++i) {
    // One device, as gloo's asks: the op is ordered in one stream, the first tensor's.
    if (tensors[i].device() != tensors[0].device())
      invalid("allreduce_coalesced's tensor " + std::to_string(i) + " is on " + tensors[i].device().str() +
              " but tensor 0 is on " + tensors[0].device().str() + ": the tensors of one call share a device");
    views.push_back(view_of(tensors[i], "allreduce_coalesced's tensor " + std::to_string(i)));
  }
  const ReduceOp op = reduce_op_of(opts.reduceOp);
  // One op of chorus (small tensors packed into shared buffers), ordered in the first tensor's
  // stream where it has one.
  const Ordered o = options_for(op_timeout(opts.timeout), tensors.empty() ? at::empty({0}) : tensors[0]);
  std::lock_guard<std::mutex> lk(issue_mu_);
  return work(rank_, c10d::OpType::ALLREDUCE_COALESCED, {peer_.all_reduce_coalesced_async(std::move(views), op, o)},
              tensors);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::ReduceOptions& opts) {
  world_->check_up();
  auto st = staged(one(tensors, "reduce"), true);
  const at::Tensor& t = st.t;
  Tensor v = view_of(t, "reduce's tensor");
  const ReduceOp op = reduce_op_of(opts.reduceOp);
  std::lock_guard<std::mutex> lk(issue_mu_);
  return work(rank_, c10d::OpType::REDUCE,
              {peer_.reduce_async(v, op, static_cast<PeerId>(opts.rootRank), options_for(op_timeout(opts.timeout), t))}, tensors,
              std::move(st.back));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllgatherOptions& opts) {
  world_->check_up();
  auto& in = one(inputs, "allgather");
  if (outputs.size() != 1) invalid("allgather takes one output list per process, not " + std::to_string(outputs.size()));
  check_blocks(outputs[0], size_, in, "allgather's output list");
  Tensor vin = view_of(in, "allgather's input");
  at::Tensor flat = at::empty({size_ * in.numel()}, in.options());
  Tensor vflat = view_of(flat, "allgather's buffer");
  const Ordered o = options_for(op_timeout(opts.timeout), in);
  std::lock_guard<std::mutex> lk(issue_mu_);
  auto part = peer_.all_gather_async(vin, vflat, o);
  return work(rank_, c10d::OpType::ALLGATHER, {std::move(part)}, outputs[0], then_copy_out(o, flat, outputs[0]));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                  const c10d::AllgatherOptions& opts) {
  world_->check_up();
  Tensor vin = view_of(input, "_allgather_base's input"), vout = view_of(output, "_allgather_base's output");
  std::lock_guard<std::mutex> lk(issue_mu_);
  return work(rank_, c10d::OpType::_ALLGATHER_BASE,
              {peer_.all_gather_async(vin, vout, options_for(op_timeout(opts.timeout), input))}, {output});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::GatherOptions& opts) {
  world_->check_up();
  auto& in = one(inputs, "gather");
  Tensor vin = view_of(in, "gather's input");
  const bool root = opts.rootRank == rank_;
  at::Tensor flat;
  Tensor vflat;
  std::vector<at::Tensor> list;
  if (root) {
    if (outputs.size() != 1) invalid("gather takes one output list on the root, not " + std::to_string(outputs.size()));
    check_blocks(outputs[0], size_, in, "gather's output list");
    list = outputs[0];
    flat = at::empty({size_ * in.numel()}, in.options());
    vflat = view_of(flat, "gather's buffer");
  } else if (!outputs.empty() && !outputs[0].empty()) {
    invalid("gather takes no output list on a rank other than the root (" + std::to_string(opts.rootRank) + ")");
  }
  const Ordered o = options_for(op_timeout(opts.timeout), in);
  std::lock_guard<std::mutex> lk(issue_mu_);
  auto part = peer_.gather_async(vin, vflat, static_cast<PeerId>(opts.rootRank), o);
  if (!root) return work(rank_, c10d::OpType::GATHER, {std::move(part)}, {});
  return work(rank_, c10d::OpType::GATHER, {std::move(part)}, list, then_copy_out(o, flat, list));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::scatter(std::vector<at::Tensor>& outputs,
                                                          std::vector<std::vector<at::Tensor>>& inputs,
                                                          const c10d::ScatterOptions& opts) {
  world_->check_up();
  auto& out = one(outputs, "scatter");
  Tensor vout = view_of(out, "scatter's output");
  Tensor vflat;
  if (opts.rootRank == rank_) {
    if (inputs.size() != 1) invalid("scatter takes one input list on the root, not " + std::to_string(inputs.size()));
    check_blocks(inputs[0], size_, out, "scatter's input list");
    vflat = view_of(flat_copy(inputs[0]), "scatter's buffer");
  } else if (!inputs.empty() && !inputs[0].empty()) {
    invalid("scatter takes no input list on a rank other than the root (" + std::to_string(opts.rootRank) + ")");
  }
  std::lock_guard<std::mutex> lk(issue_mu_);
  return work(rank_, c10d::OpType::SCATTER,
              {peer_.scatter_async(vflat, vout, static_cast<PeerId>(opts.rootRank), options_for(op_timeout(opts.timeout), out))},
              outputs);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                 std::vector<std::vector<at::Tensor>>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) {
  world_->check_up();
  auto& out = one(outputs, "reduce_scatter");
  if (inputs.size() != 1) invalid("reduce_scatter takes one input list per process, not " + std::to_string(inputs.size()));
  check_blocks(inputs[0], size_, out, "reduce_scatter's input list");
  Tensor vout = view_of(out, "reduce_scatter's output");
  Tensor vflat = view_of(flat_copy(inputs[0]), "reduce_scatter's buffer");
  const ReduceOp op = reduce_op_of(opts.reduceOp);
  std::lock_guard<std::mutex> lk(issue_mu_);
  return work(rank_, c10d::OpType::REDUCE_SCATTER,
              {peer_.reduce_scatter_async(vflat, vout, op, options_for(op_timeout(opts.timeout), out))}, outputs);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                       const c10d::ReduceScatterOptions& opts) {
  world_->check_up();
  Tensor vin = view_of(input, "_reduce_scatter_base's input"), vout = view_of(output, "_reduce_scatter_base's output");
  const ReduceOp op = reduce_op_of(opts.reduceOp);
  std::lock_guard<std::mutex> lk(issue_mu_);
  return work(rank_, c10d::OpType::_REDUCE_SCATTER_BASE,
              {peer_.reduce_scatter_async(vin, vout, op, options_for(op_timeout(opts.timeout), output))}, {output});
}

std::vector<chorus::Work> ProcessGroupChorus::exchange(const std::vector<at::Tensor>& out_blocks,
                                                      const std::vector<at::Tensor>& in_blocks,
                                                      std::chrono::milliseconds timeout) {
  // Under issue_mu_. Own blocks are copied here; empty blocks move nothing (both ends know the
  // sizes, so both skip them).
  if (out_blocks[rank_].numel() != in_blocks[rank_].numel())
    invalid("alltoall: this rank's own block is " + std::to_string(in_blocks[rank_].numel()) + " elements in and " +
            std::to_string(out_blocks[rank_].numel()) + " out");
  const uint64_t tag = kExchangeTag | exchanges_++;
  std::vector<chorus::Work> parts;
  for (int j = 0; j < size_; ++j) {
    if (j == rank_) {
      out_blocks[j].view({-1}).copy_(in_blocks[j].reshape({-1}));
      continue;
    }
    if (in_blocks[j].numel() > 0)
      parts.push_back(peer_.send_async(view_of(in_blocks[j], "alltoall's block to rank " + std::to_string(j)),
                                       static_cast<PeerId>(j), tag, options_for(timeout, in_blocks[j])));
    if (out_blocks[j].numel() > 0) {
      Tensor v = view_of(out_blocks[j], "alltoall's block from rank " + std::to_string(j));
      parts.push_back(peer_.recv_async(v, static_cast<PeerId>(j), tag, options_for(timeout, out_blocks[j])));
    }
  }
  return parts;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                std::vector<int64_t>& output_splits,
                                                                std::vector<int64_t>& input_splits,
                                                                const c10d::AllToAllOptions& opts) {
  world_->check_up();
  (void)dtype_of(input.scalar_type());  // before any block is sent
  (void)dtype_of(output.scalar_type());
  if (output_splits.empty() && input_splits.empty()) {
    Tensor vin = view_of(input, "alltoall_base's input"), vout = view_of(output, "alltoall_base's output");
    std::lock_guard<std::mutex> lk(issue_mu_);
    return work(rank_, c10d::OpType::ALLTOALL_BASE, {peer_.all_to_all_async(vin, vout, options_for(op_timeout(opts.timeout), input))},
                {output});
  }
  // Split sizes count rows (the first dimension); an empty list splits evenly.
  auto blocks = [&](at::Tensor& t, std::vector<int64_t>& splits, const char* what) {
    if (!t.is_contiguous()) invalid(std::string("alltoall_base's ") + what + " is not contiguous");
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    std::vector<int64_t> s = splits;
    if (s.empty()) {
      if (rows % size_ != 0)
        invalid(std::string("alltoall_base's ") + what + " has " + std::to_string(rows) + " rows, not divisible by " +
                std::to_string(size_));
      s.assign(size_, rows / size_);
    }
    if (static_cast<int>(s.size()) != size_)
      invalid(std::string("alltoall_base's ") + what + " split sizes name " + std::to_string(s.size()) +
              " blocks for " + std::to_string(size_) + " ranks");
    int64_t sum = 0;
    for (auto n : s) {
      if (n < 0) invalid(std::string("alltoall_base's ") + what + " split sizes hold a negative size");
      sum += n;
    }
    if (sum != rows)
      invalid(std::string("alltoall_base's ") + what + " split sizes add up to " + std::to_string(sum) + " rows, not " +
              std::to_string(rows));
    std::vector<at::Tensor> out;
    int64_t at = 0;
    for (auto n : s) {
      out.push_back(t.dim() == 0 ? t.view({1}) : t.narrow(0, at, n));
      at += n;
    }
    return out;
  };
  auto outs = blocks(output, output_splits, "output");
  auto ins = blocks(input, input_splits, "input");
  std::lock_guard<std::mutex> lk(issue_mu_);
  return work(rank_, c10d::OpType::ALLTOALL_BASE, exchange(outs, ins, op_timeout(opts.timeout)), {output});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllToAllOptions& opts) {
  world_->check_up();
  if (static_cast<int>(outputs.size()) != size_ || static_cast<int>(inputs.size()) != size_)
    invalid("alltoall takes one input and one output tensor per rank (" + std::to_string(size_) + "), not " +
            std::to_string(inputs.size()) + " and " + std::to_string(outputs.size()));
  for (int j = 0; j < size_; ++j) {
    if (!outputs[j].is_contiguous() || !inputs[j].is_contiguous())
      invalid("alltoall's tensors for rank " + std::to_string(j) + " are not contiguous");
    (void)dtype_of(inputs[j].scalar_type());  // before any block is sent
    (void)dtype_of(outputs[j].scalar_type());
  }
  std::lock_guard<std::mutex> lk(issue_mu_);
  return work(rank_, c10d::OpType::ALLTOALL, exchange(outputs, inputs, op_timeout(opts.timeout)), outputs);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  world_->check_up();
  auto st = staged(one(tensors, "send"), false);
  const at::Tensor& t = st.t;
  Tensor v = view_of(t, "send's tensor");
  std::lock_guard<std::mutex> lk(issue_mu_);
  return work(rank_, c10d::OpType::SEND,
              {peer_.send_async(v, static_cast<PeerId>(dst), static_cast<uint32_t>(tag), options_for(op_timeout({}), t))}, tensors);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  world_->check_up();
  auto st = staged(one(tensors, "recv"), true);
  const at::Tensor& t = st.t;
  Tensor v = view_of(t, "recv's tensor");
  std::lock_guard<std::mutex> lk(issue_mu_);
  return work(rank_, c10d::OpType::RECV,
              {peer_.recv_async(v, static_cast<PeerId>(src), static_cast<uint32_t>(tag), options_for(op_timeout({}), t))}, tensors,
              std::move(st.back));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  world_->check_up();
  auto st = staged(one(tensors, "recv"), true);
  const at::Tensor& t = st.t;
  Tensor v = view_of(t, "recv's tensor");
  std::lock_guard<std::mutex> lk(issue_mu_);
  return work(rank_, c10d::OpType::RECVANYSOURCE,
              {peer_.recv_any_async(v, static_cast<uint32_t>(tag), options_for(op_timeout({}), t))}, tensors,
              std::move(st.back));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::barrier(const c10d::BarrierOptions& opts) {
  world_->check_up();
  OpOptions o;
  o.timeout = op_timeout(opts.timeout);
  std::lock_guard<std::mutex> lk(issue_mu_);
  return work(rank_, c10d::OpType::BARRIER, {peer_.barrier_async(o)}, {});
}

} // namespace chorus::python
