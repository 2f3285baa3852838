#include "op_runner.hpp"


namespace chorus::bench {

namespace {

bool total_buffer_op(BenchOp op) {
  return op == BenchOp::all_gather || op == BenchOp::reduce_scatter || op == BenchOp::all_to_all ||
         op == BenchOp::gather || op == BenchOp::scatter;
}

} // namespace

Layout layout_for(BenchOp op, DType dtype, uint32_t peers, std::size_t size_bytes) {
  Layout l;
  if (op == BenchOp::barrier) return l;
  const std::size_t esize = dtype_size(dtype);
  std::size_t elems = size_bytes / esize;
  if (total_buffer_op(op)) elems = elems / peers * peers;
  l.count = elems;
  l.bytes = elems * esize;
  l.block = total_buffer_op(op) ? elems / peers : elems;
  return l;
}

std::size_t host_bytes(BenchOp op, DType dtype, uint32_t peers, const Layout& l) {
  const std::size_t n = peers, c = l.count * dtype_size(dtype), b = l.block * dtype_size(dtype);
  switch (op) {
    case BenchOp::all_reduce: return n * 2 * c;
    case BenchOp::reduce: return n * c + c;
    case BenchOp::broadcast: return n * c;
    case BenchOp::all_gather: return n * (b + c);
    case BenchOp::reduce_scatter: return n * (c + b);
    case BenchOp::all_to_all: return n * 2 * c;
    case BenchOp::gather: return n * b + c;
    case BenchOp::scatter: return c + n * b;
    case BenchOp::send_recv: return n * c;
    case BenchOp::barrier: return 0;
  }
  return 0;
}

OpRunner::OpRunner(const Options& o, Peer& peer, uint32_t rank)
    : o_(o), peer_(peer), rank_(rank), n_(o.peers), pattern_(o.dtype, uses_redop(o.op), o.redop, o.peers),
      reference_(pattern_, o.redop, o.peers) {}

bool OpRunner::sends() const { return o_.op == BenchOp::send_recv && rank_ % 2 == 0 && rank_ + 1 < n_; }
bool OpRunner::receives() const { return o_.op == BenchOp::send_recv && rank_ % 2 == 1; }
uint32_t OpRunner::partner() const { return rank_ % 2 == 0 ? rank_ + 1 : rank_ - 1; }

void OpRunner::prepare(const Layout& l) {
  layout_ = l;
  in_ = out_ = hin_ = hout_ = Tensor();
  const DType t = o_.dtype;
  const Device dev = o_.device == DeviceType::cuda ? Device::cuda(static_cast<int>(rank_ % o_.gpus)) : Device::cpu();
  auto make = [&](std::size_t elems) { return Tensor::zeros(t, {static_cast<int64_t>(elems)}, dev); };
  const bool root = rank_ == o_.root;
  const std::size_t c = l.count, b = l.block;
  switch (o_.op) {
    case BenchOp::all_reduce:
    case BenchOp::all_to_all: in_ = make(c); out_ = make(c); break;
    case BenchOp::reduce: in_ = make(c); if (root) out_ = make(c); break;
    case BenchOp::broadcast: in_ = make(c); break;
    case BenchOp::all_gather: in_ = make(b); out_ = make(c); break;
    case BenchOp::reduce_scatter: in_ = make(c); out_ = make(b); break;
    case BenchOp::gather: in_ = make(b); if (root) out_ = make(c); break;
    case BenchOp::scatter: if (root) in_ = make(c); out_ = make(b); break;
    case BenchOp::send_recv:
      if (sends()) in_ = make(c);
      if (receives()) out_ = make(c);
      break;
    case BenchOp::barrier: break;
  }
  auto mirror = [](const Tensor& d) { return d.defined() && d.is_cuda() ? Tensor::zeros(d.dtype(), d.shape()) : d; };
  hin_ = mirror(in_);
  hout_ = mirror(out_);
  reset_for_check();
}

void OpRunner::reset_for_check() {
  // Broadcast's non-root peers receive into in_ (the op is in place): their buffer is output.
  const bool in_is_output = o_.op == BenchOp::broadcast && rank_ != o_.root;
  if (hin_.defined() && hin_.numel()) {
    if (in_is_output) ref::fill_sentinel(o_.dtype, hin_.data(), hin_.numel());
    else ref::fill_pattern(pattern_, rank_, hin_.data(), 0, hin_.numel());
  }
  if (hout_.defined() && hout_.numel()) ref::fill_sentinel(o_.dtype, hout_.data(), hout_.numel());
  if (in_.defined() && in_.is_cuda()) in_.copy_from(hin_);
  if (out_.defined() && out_.is_cuda()) out_.copy_from(hout_);
}

Status OpRunner::run() {
  const ReduceOp r = o_.redop;
  const PeerId root = o_.root;
  switch (o_.op) {
    case BenchOp::all_reduce: return peer_.all_reduce(in_, out_, r);
    case BenchOp::reduce: return peer_.reduce(in_, rank_ == root ? out_ : none_, r, root);
    case BenchOp::broadcast: return peer_.broadcast(in_, root);
    case BenchOp::all_gather: return peer_.all_gather(in_, out_);
    case BenchOp::reduce_scatter: return peer_.reduce_scatter(in_, out_, r);
    case BenchOp::all_to_all: return peer_.all_to_all(in_, out_);
    case BenchOp::gather: return peer_.gather(in_, rank_ == root ? out_ : none_, root);
    case BenchOp::scatter: return peer_.scatter(rank_ == root ? in_ : none_, out_, root);
    case BenchOp::send_recv:
      if (sends()) return peer_.send(in_, partner());
      if (receives()) return peer_.recv(out_, partner());
      return Status::ok();
    case BenchOp::barrier: return peer_.barrier();
  }
  return Status::ok();
}

std::size_t OpRunner::count_wrong() {
  if (in_.defined() && in_.is_cuda()) hin_.copy_from(in_);
  if (out_.defined() && out_.is_cuda()) hout_.copy_from(out_);
  const Tensor& in_ = hin_;  // the checks below read the host mirrors
  const Tensor& out_ = hout_;
  const DType t = o_.dtype;
  const std::size_t c = layout_.count, b = layout_.block;
  const bool root = rank_ == o_.root;
  std::size_t wrong = 0;
  // Results.
  auto check_reduced = [&](const Tensor& buf, std::size_t n, std::size_t first) {
    for (std::size_t i = 0; i < n; ++i) wrong += !ref::matches(t, buf.data(), i, reference_.reduced(first + i));
  };
  auto check_copied = [&](const Tensor& buf, std::size_t n, uint32_t from, std::size_t first,
                          std::size_t at) {
    for (std::size_t i = 0; i < n; ++i)
      wrong += !ref::matches(t, buf.data(), at + i, reference_.copied(from, first + i));
  };
  // Inputs the op takes as const must come back unchanged.
  auto check_input = [&]() {
    if (in_.defined()) check_copied(in_, in_.numel(), rank_, 0, 0);
  };
  switch (o_.op) {
    case BenchOp::all_reduce: check_reduced(out_, c, 0); check_input(); break;
    case BenchOp::reduce: if (root) check_reduced(out_, c, 0); check_input(); break;
    case BenchOp::broadcast: check_copied(in_, c, o_.root, 0, 0); break;
    case BenchOp::all_gather:
      for (uint32_t j = 0; j < n_; ++j) check_copied(out_, b, j, 0, j * b);
      check_input();
      break;
    case BenchOp::reduce_scatter: check_reduced(out_, b, rank_ * b); check_input(); break;
    case BenchOp::all_to_all:
      for (uint32_t j = 0; j < n_; ++j) check_copied(out_, b, j, rank_ * b, j * b);
      check_input();
      break;
    case BenchOp::gather:
      if (root)
        for (uint32_t j = 0; j < n_; ++j) check_copied(out_, b, j, 0, j * b);
      check_input();
      break;
    case BenchOp::scatter: check_copied(out_, b, o_.root, rank_ * b, 0); check_input(); break;
    case BenchOp::send_recv:
      if (receives()) check_copied(out_, c, partner(), 0, 0);
      check_input();
      break;
    case BenchOp::barrier: break;
  }
  return wrong;
}

void OpRunner::release() { in_ = out_ = hin_ = hout_ = Tensor(); }

} // namespace chorus::bench
