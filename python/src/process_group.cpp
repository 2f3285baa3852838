#include "process_group.hpp"

#include <string>

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/record_function.h>

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

// The op chorus runs for torch's `op` over `t`'s dtype (bool's and complex's rules; an
// undefined tensor is view_of's to refuse).
ReduceOp reduce_op_of(const c10d::ReduceOp& op, const at::Tensor& t, const std::string& what) {
  return t.defined() ? reduce_op_for(reduce_op_of(op), t.scalar_type(), what) : reduce_op_of(op);
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
// An output the op writes whose elements share memory (an expand) could not take the result:
// refused at the call, not once the op is done (when part of it may have been written).
void check_writable(const at::Tensor& t, const std::string& what) {
  if (t.defined() && at::has_internal_overlap(t) == at::MemOverlap::Yes)
    invalid(what + " has elements that share memory (an expand): the op cannot write it (call .clone() first)");
}

// `written`: the op writes the list's tensors (an output list).
void check_blocks(const std::vector<at::Tensor>& list, size_t n, const at::Tensor& like, const std::string& what,
                  bool written) {
  if (list.size() != n)
    invalid(what + " holds " + std::to_string(list.size()) + " tensors, not one per rank (" + std::to_string(n) + ")");
  for (const auto& t : list) {
    if (written) check_writable(t, what + "'s tensor");
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
// transpose, a slice with a step; gloo takes those), a contiguous copy. What the op reads (`in`,
// `inout`) is copied in at the call; what it writes (`out`, `inout`), `back` copies into the
// caller's tensor once the op is done.
enum class Use { in, out, inout };
struct Staged {
  at::Tensor t;
  std::function<void()> back;
};
Staged staged(const at::Tensor& t, Use use, const std::string& what) {
  if (!t.defined() || t.layout() != c10::kStrided || !t.is_cpu()) return {t, {}};
  // A conjugate or negative view (x.conj()) is contiguous, but its memory holds the values before
  // the conjugation: staged too, its values resolved (copy_ writes one back as it should).
  if (t.is_contiguous() && !t.is_conj() && !t.is_neg()) return {t, {}};
  if (use != Use::in) check_writable(t, what);
  at::NoGradGuard raw;  // the tensor is read as memory, as gloo does (autograd has no say)
  at::Tensor c = use == Use::out ? at::empty(t.sizes(), t.options())
                                 : t.detach().resolve_conj().resolve_neg().contiguous();
  if (use == Use::in) return {c, {}};
  return {c, [t, c]() mutable {
            at::NoGradGuard raw;  // a parameter's view is written as memory, as gloo does
            t.copy_(c);
          }};
}

// What runs once an op is done: the copies back of an op's several staged tensors, as one.
struct After {
  std::vector<std::function<void()>> fns;
  void add(std::function<void()> f) {
    if (f) fns.push_back(std::move(f));
  }
  std::function<void()> take() {
    if (fns.empty()) return {};
    if (fns.size() == 1) return std::move(fns[0]);
    return [fns = std::move(fns)]() mutable {
      for (auto& f : fns) f();
    };
  }
};

// torch.profiler's name of an op ("chorus:all_reduce"), where a profiler (any RecordFunction
// callback) is on: c10d::Work records the op from its construction to its end
// (recordFunctionEndCallback_, which ChorusWork calls once the op is done). Without callbacks,
// no title, so that the Work does not allocate a RecordFunction that records nothing.
const char* title(const char* name) { return at::hasCallbacks() ? name : nullptr; }

// A Work whose result is copied out (`after`) copies it as soon as the op is done, also where
// the caller drops the Work unwaited (as gloo fills its lists).
// `name`: torch.profiler's (title()).
c10::intrusive_ptr<c10d::Work> work(int rank, c10d::OpType type, const char* name, std::vector<chorus::Work> parts,
                                    std::vector<at::Tensor> outputs, std::function<void()> after = {}) {
  const char* profiled = title(name);
  // A Work that copies out, or whose profiler event should end when the op does (not at a later
  // wait), settles as soon as the op is done.
  const bool settle_now = static_cast<bool>(after) || profiled;
  auto w = c10::make_intrusive<ChorusWork>(rank, type, profiled, std::move(parts), std::move(outputs),
                                           std::move(after));
  if (settle_now) w->settle_when_done();
  return w;
}

// An op on the one tensor torch passes in a list (`op` names it in errors; `use`: what the op does
// with it): staged where chorus cannot take it as it is, then handed in under `issue_mu` by
// `issue`, given chorus's view of it and the op's options (made within the expression that hands
// the op in, as Ordered asks). The caller checks the world first.
template <class Issue>
c10::intrusive_ptr<c10d::Work> on_one_tensor(std::mutex& issue_mu, int rank, std::vector<at::Tensor>& tensors,
                                             const std::string& op, Use use, c10d::OpType type, const char* name,
                                             std::chrono::milliseconds timeout, Issue issue) {
  const std::string what = op + "'s tensor";
  auto st = staged(one(tensors, op.c_str()), use, what);
  Tensor v = view_of(st.t, what);
  std::lock_guard<std::mutex> lk(issue_mu);
  return work(rank, type, name, {issue(v, options_for(timeout, st.t))}, tensors, std::move(st.back));
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
  return on_one_tensor(issue_mu_, rank_, tensors, "broadcast", Use::inout, c10d::OpType::BROADCAST, "chorus:broadcast",
                       op_timeout(opts.timeout), [&](Tensor& v, const Ordered& o) {
                         return peer_.broadcast_async(v, static_cast<PeerId>(opts.rootRank), o);
                       });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceOptions& opts) {
  world_->check_up();
  const ReduceOp op = reduce_op_of(opts.reduceOp, one(tensors, "allreduce"), "allreduce");
  return on_one_tensor(issue_mu_, rank_, tensors, "allreduce", Use::inout, c10d::OpType::ALLREDUCE, "chorus:all_reduce",
                       op_timeout(opts.timeout),
                       [&](Tensor& v, const Ordered& o) { return peer_.all_reduce_async(v, op, o); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                      const c10d::AllreduceCoalescedOptions& opts) {
  world_->check_up();
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined()) invalid("allreduce_coalesced's tensor " + std::to_string(i) + " is an undefined tensor");
    // One device, as gloo's asks: the op is ordered in one stream, the first tensor's.
    if (tensors[i].device() != tensors[0].device())
      invalid("allreduce_coalesced's tensor " + std::to_string(i) + " is on " + tensors[i].device().str() +
              " but tensor 0 is on " + tensors[0].device().str() + ": the tensors of one call share a device");
  }
  // One reduction for every tensor, each checked for its own dtype (a complex tensor takes SUM and
  // AVG only). bool's SUM is a MAX over bytes and complex's a sum over float pairs, which the op
  // would not tell from a uint8's or a float's: those do not mix with other dtypes here. (Other
  // mixes of dtypes the op refuses itself, on every rank at once.)
  ReduceOp op = reduce_op_of(opts.reduceOp);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string what = "allreduce_coalesced's tensor " + std::to_string(i);
    op = reduce_op_of(opts.reduceOp, tensors[i], what);
    const auto kind = [](const at::Tensor& t) { return t.scalar_type() == at::kBool ? 1 : t.is_complex() ? 2 : 0; };
    if (kind(tensors[i]) != kind(tensors[0]))
      invalid(what + " is " + dtype_name(tensors[i].scalar_type()) + " but tensor 0 is " +
              dtype_name(tensors[0].scalar_type()) + ": bool and complex tensors do not mix with other dtypes in one call");
  }
  std::vector<Tensor> views;
  After after;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string what = "allreduce_coalesced's tensor " + std::to_string(i);
    auto st = staged(tensors[i], Use::inout, what);
    views.push_back(view_of(st.t, what));
    after.add(std::move(st.back));
  }
  // One op of chorus (small tensors packed into shared buffers), ordered in the first tensor's
  // stream where it has one.
  const Ordered o = options_for(op_timeout(opts.timeout), tensors.empty() ? at::empty({0}) : tensors[0]);
  std::lock_guard<std::mutex> lk(issue_mu_);
  return work(rank_, c10d::OpType::ALLREDUCE_COALESCED, "chorus:all_reduce_coalesced",
              {peer_.all_reduce_coalesced_async(std::move(views), op, o)}, tensors, after.take());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::ReduceOptions& opts) {
  world_->check_up();
  const ReduceOp op = reduce_op_of(opts.reduceOp, one(tensors, "reduce"), "reduce");
  return on_one_tensor(issue_mu_, rank_, tensors, "reduce", Use::inout, c10d::OpType::REDUCE, "chorus:reduce",
                       op_timeout(opts.timeout), [&](Tensor& v, const Ordered& o) {
                         return peer_.reduce_async(v, op, static_cast<PeerId>(opts.rootRank), o);
                       });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllgatherOptions& opts) {
  world_->check_up();
  auto& in = one(inputs, "allgather");
  if (outputs.size() != 1) invalid("allgather takes one output list per process, not " + std::to_string(outputs.size()));
  check_blocks(outputs[0], size_, in, "allgather's output list", true);
  auto st = staged(in, Use::in, "allgather's input");
  Tensor vin = view_of(st.t, "allgather's input");
  at::Tensor flat = at::empty({size_ * in.numel()}, in.options());
  Tensor vflat = view_of(flat, "allgather's buffer");
  const Ordered o = options_for(op_timeout(opts.timeout), in);
  std::lock_guard<std::mutex> lk(issue_mu_);
  auto part = peer_.all_gather_async(vin, vflat, o);
  return work(rank_, c10d::OpType::ALLGATHER, "chorus:all_gather", {std::move(part)}, outputs[0],
              then_copy_out(o, flat, outputs[0]));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                  const c10d::AllgatherOptions& opts) {
  world_->check_up();
  auto in = staged(input, Use::in, "_allgather_base's input");
  auto out = staged(output, Use::out, "_allgather_base's output");
  Tensor vin = view_of(in.t, "_allgather_base's input"), vout = view_of(out.t, "_allgather_base's output");
  std::lock_guard<std::mutex> lk(issue_mu_);
  return work(rank_, c10d::OpType::_ALLGATHER_BASE, "chorus:_allgather_base",
              {peer_.all_gather_async(vin, vout, options_for(op_timeout(opts.timeout), input))}, {output},
              std::move(out.back));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  world_->check_up();
  // One all_gather of one flat buffer: block r is rank r's inputs, flat and in order, so the
  // inputs share a dtype and a device (as gloo's do) and every rank's list is shaped alike.
  if (inputs.empty()) invalid("allgather_coalesced takes a list of at least one input tensor, not an empty one");
  if (static_cast<int>(output_lists.size()) != size_)
    invalid("allgather_coalesced takes one output list per rank (" + std::to_string(size_) + "), not " +
            std::to_string(output_lists.size()));
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].defined()) invalid("allgather_coalesced's input " + std::to_string(i) + " is an undefined tensor");
  const at::Tensor& first = inputs[0];
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (inputs[i].scalar_type() != first.scalar_type() || inputs[i].device() != first.device())
      invalid("allgather_coalesced's input " + std::to_string(i) + " is " + dtype_name(inputs[i].scalar_type()) +
              " on " + inputs[i].device().str() + " but input 0 is " + dtype_name(first.scalar_type()) + " on " +
              first.device().str() + ": the inputs of one call share a dtype and a device");
  }
  std::vector<at::Tensor> list;  // every output, rank by rank: the buffer's order
  for (size_t r = 0; r < output_lists.size(); ++r) {
    const auto& outs = output_lists[r];
    if (outs.size() != inputs.size())
      invalid("allgather_coalesced's output list " + std::to_string(r) + " holds " + std::to_string(outs.size()) +
              " tensors, not one per input (" + std::to_string(inputs.size()) + ")");
    for (size_t i = 0; i < outs.size(); ++i) {
      const at::Tensor& t = outs[i];
      if (!t.defined() || !t.sizes().equals(inputs[i].sizes()) || t.scalar_type() != inputs[i].scalar_type() ||
          t.device() != inputs[i].device())
        invalid("allgather_coalesced's output list " + std::to_string(r) + " holds at " + std::to_string(i) + " " +
                (t.defined() ? "a " + dtype_name(t.scalar_type()) + c10::str(t.sizes()) + " on " +
                                   t.device().str()
                             : std::string("an undefined tensor")) +
                " where input " + std::to_string(i) + " is " + dtype_name(inputs[i].scalar_type()) +
                c10::str(inputs[i].sizes()) + " on " + inputs[i].device().str());
      check_writable(t, "allgather_coalesced's output list " + std::to_string(r) + "'s tensor " + std::to_string(i));
      list.push_back(t);
    }
  }
  at::Tensor in_flat = flat_copy(inputs);  // a contiguous copy, whatever the inputs' strides
  Tensor vin = view_of(in_flat, "allgather_coalesced's inputs");
  at::Tensor flat = at::empty({size_ * in_flat.numel()}, in_flat.options());
  Tensor vflat = view_of(flat, "allgather_coalesced's buffer");
  const Ordered o = options_for(op_timeout(opts.timeout), first);
  std::lock_guard<std::mutex> lk(issue_mu_);
  auto part = peer_.all_gather_async(vin, vflat, o);
  return work(rank_, c10d::OpType::ALLGATHER_COALESCED, "chorus:all_gather_coalesced", {std::move(part)}, list,
              then_copy_out(o, flat, list));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::GatherOptions& opts) {
  world_->check_up();
  auto& in = one(inputs, "gather");
  const bool root = opts.rootRank == rank_;
  at::Tensor flat;
  Tensor vflat;
  std::vector<at::Tensor> list;
  if (root) {
    if (outputs.size() != 1) invalid("gather takes one output list on the root, not " + std::to_string(outputs.size()));
    check_blocks(outputs[0], size_, in, "gather's output list", true);
    list = outputs[0];
    flat = at::empty({size_ * in.numel()}, in.options());
    vflat = view_of(flat, "gather's buffer");
  } else if (!outputs.empty() && !outputs[0].empty()) {
    invalid("gather takes no output list on a rank other than the root (" + std::to_string(opts.rootRank) + ")");
  }
  auto st = staged(in, Use::in, "gather's input");
  Tensor vin = view_of(st.t, "gather's input");
  const Ordered o = options_for(op_timeout(opts.timeout), in);
  std::lock_guard<std::mutex> lk(issue_mu_);
  auto part = peer_.gather_async(vin, vflat, static_cast<PeerId>(opts.rootRank), o);
  if (!root) return work(rank_, c10d::OpType::GATHER, "chorus:gather", {std::move(part)}, {});
  return work(rank_, c10d::OpType::GATHER, "chorus:gather", {std::move(part)}, list, then_copy_out(o, flat, list));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::scatter(std::vector<at::Tensor>& outputs,
                                                          std::vector<std::vector<at::Tensor>>& inputs,
                                                          const c10d::ScatterOptions& opts) {
  world_->check_up();
  auto& out = one(outputs, "scatter");
  Tensor vflat;
  if (opts.rootRank == rank_) {
    if (inputs.size() != 1) invalid("scatter takes one input list on the root, not " + std::to_string(inputs.size()));
    check_blocks(inputs[0], size_, out, "scatter's input list", false);
    vflat = view_of(flat_copy(inputs[0]), "scatter's buffer");
  } else if (!inputs.empty() && !inputs[0].empty()) {
    invalid("scatter takes no input list on a rank other than the root (" + std::to_string(opts.rootRank) + ")");
  }
  auto st = staged(out, Use::out, "scatter's output");
  Tensor vout = view_of(st.t, "scatter's output");
  std::lock_guard<std::mutex> lk(issue_mu_);
  return work(rank_, c10d::OpType::SCATTER, "chorus:scatter",
              {peer_.scatter_async(vflat, vout, static_cast<PeerId>(opts.rootRank), options_for(op_timeout(opts.timeout), out))},
              outputs, std::move(st.back));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                 std::vector<std::vector<at::Tensor>>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) {
  world_->check_up();
  auto& out = one(outputs, "reduce_scatter");
  if (inputs.size() != 1) invalid("reduce_scatter takes one input list per process, not " + std::to_string(inputs.size()));
  check_blocks(inputs[0], size_, out, "reduce_scatter's input list", false);
  const ReduceOp op = reduce_op_of(opts.reduceOp, out, "reduce_scatter");
  auto st = staged(out, Use::out, "reduce_scatter's output");
  Tensor vout = view_of(st.t, "reduce_scatter's output");
  Tensor vflat = view_of(flat_copy(inputs[0]), "reduce_scatter's buffer");
  std::lock_guard<std::mutex> lk(issue_mu_);
  return work(rank_, c10d::OpType::REDUCE_SCATTER, "chorus:reduce_scatter",
              {peer_.reduce_scatter_async(vflat, vout, op, options_for(op_timeout(opts.timeout), out))}, outputs,
              std::move(st.back));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                       const c10d::ReduceScatterOptions& opts) {
  world_->check_up();
  if (input.defined() && output.defined() && input.scalar_type() != output.scalar_type())
    invalid("_reduce_scatter_base's input is " + dtype_name(input.scalar_type()) + " and its output " +
            dtype_name(output.scalar_type()) + ": they share a dtype");
  const ReduceOp op = reduce_op_of(opts.reduceOp, input, "_reduce_scatter_base");
  auto in = staged(input, Use::in, "_reduce_scatter_base's input");
  auto out = staged(output, Use::out, "_reduce_scatter_base's output");
  Tensor vin = view_of(in.t, "_reduce_scatter_base's input"), vout = view_of(out.t, "_reduce_scatter_base's output");
  std::lock_guard<std::mutex> lk(issue_mu_);
  return work(rank_, c10d::OpType::_REDUCE_SCATTER_BASE, "chorus:_reduce_scatter_base",
              {peer_.reduce_scatter_async(vin, vout, op, options_for(op_timeout(opts.timeout), output))}, {output},
              std::move(out.back));
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
  if (!input.defined() || !output.defined()) invalid("alltoall_base takes defined input and output tensors");
  (void)elements_of(input.scalar_type());  // before any block is sent
  if (input.scalar_type() != output.scalar_type())
    invalid("alltoall_base's input is " + dtype_name(input.scalar_type()) + " and its output " +
            dtype_name(output.scalar_type()) + ": they share a dtype");
  auto in = staged(input, Use::in, "alltoall_base's input");
  auto out = staged(output, Use::out, "alltoall_base's output");
  if (output_splits.empty() && input_splits.empty()) {
    Tensor vin = view_of(in.t, "alltoall_base's input"), vout = view_of(out.t, "alltoall_base's output");
    std::lock_guard<std::mutex> lk(issue_mu_);
    return work(rank_, c10d::OpType::ALLTOALL_BASE, "chorus:all_to_all_single",
                {peer_.all_to_all_async(vin, vout, options_for(op_timeout(opts.timeout), input))}, {output},
                std::move(out.back));
  }
  // Split sizes count rows (the first dimension); an empty list splits evenly.
  auto blocks = [&](at::Tensor& t, std::vector<int64_t>& splits, const char* what) {
    if (!t.is_contiguous())
      invalid(std::string("alltoall_base's ") + what + " is not contiguous (a CUDA tensor is not staged)");
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
  auto outs = blocks(out.t, output_splits, "output");
  auto ins = blocks(in.t, input_splits, "input");
  std::lock_guard<std::mutex> lk(issue_mu_);
  return work(rank_, c10d::OpType::ALLTOALL_BASE, "chorus:all_to_all_single",
              exchange(outs, ins, op_timeout(opts.timeout)), {output}, std::move(out.back));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::alltoall(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllToAllOptions& opts) {
  world_->check_up();
  if (static_cast<int>(outputs.size()) != size_ || static_cast<int>(inputs.size()) != size_)
    invalid("alltoall takes one input and one output tensor per rank (" + std::to_string(size_) + "), not " +
            std::to_string(inputs.size()) + " and " + std::to_string(outputs.size()));
  // Every check before any block is sent or staged.
  for (int j = 0; j < size_; ++j) {
    if (!outputs[j].defined() || !inputs[j].defined())
      invalid("alltoall's tensors for rank " + std::to_string(j) + " are not both defined");
    (void)elements_of(inputs[j].scalar_type());
    if (inputs[j].scalar_type() != inputs[0].scalar_type() || outputs[j].scalar_type() != inputs[0].scalar_type())
      invalid("alltoall's tensors for rank " + std::to_string(j) + " are " + dtype_name(inputs[j].scalar_type()) +
              " in and " + dtype_name(outputs[j].scalar_type()) + " out where input 0 is " +
              dtype_name(inputs[0].scalar_type()) + ": the tensors of one call share a dtype");
    if ((!outputs[j].is_cpu() && !outputs[j].is_contiguous()) || (!inputs[j].is_cpu() && !inputs[j].is_contiguous()))
      invalid("alltoall's tensors for rank " + std::to_string(j) + " are not contiguous (a CUDA tensor is not staged)");
  }
  std::vector<at::Tensor> outs, ins;
  After after;
  for (int j = 0; j < size_; ++j) {
    auto i = staged(inputs[j], Use::in, "alltoall's input " + std::to_string(j));
    auto o = staged(outputs[j], Use::out, "alltoall's output " + std::to_string(j));
    ins.push_back(std::move(i.t));
    outs.push_back(std::move(o.t));
    after.add(std::move(o.back));
  }
  std::lock_guard<std::mutex> lk(issue_mu_);
  return work(rank_, c10d::OpType::ALLTOALL, "chorus:all_to_all", exchange(outs, ins, op_timeout(opts.timeout)), outputs,
              after.take());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  world_->check_up();
  return on_one_tensor(issue_mu_, rank_, tensors, "send", Use::in, c10d::OpType::SEND, "chorus:send", op_timeout({}),
                       [&](Tensor& v, const Ordered& o) {
                         return peer_.send_async(v, static_cast<PeerId>(dst), static_cast<uint32_t>(tag), o);
                       });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  world_->check_up();
  return on_one_tensor(issue_mu_, rank_, tensors, "recv", Use::out, c10d::OpType::RECV, "chorus:recv", op_timeout({}),
                       [&](Tensor& v, const Ordered& o) {
                         return peer_.recv_async(v, static_cast<PeerId>(src), static_cast<uint32_t>(tag), o);
                       });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  world_->check_up();
  return on_one_tensor(issue_mu_, rank_, tensors, "recv", Use::out, c10d::OpType::RECVANYSOURCE, "chorus:recv_anysource",
                       op_timeout({}),
                       [&](Tensor& v, const Ordered& o) { return peer_.recv_any_async(v, static_cast<uint32_t>(tag), o); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::barrier(const c10d::BarrierOptions& opts) {
  world_->check_up();
  OpOptions o;
  o.timeout = op_timeout(opts.timeout);
  std::lock_guard<std::mutex> lk(issue_mu_);
  return work(rank_, c10d::OpType::BARRIER, "chorus:barrier", {peer_.barrier_async(o)}, {});
}

} // namespace chorus::python
