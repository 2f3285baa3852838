#include "actors/local_server/op_validation.hpp"

namespace chorus {

namespace {

bool by_data(const OpRequestData& r) {
  return r.root_from_data && (r.op.kind == OpKind::broadcast || r.op.kind == OpKind::scatter);
}
// The tensor whose dtype and shape every peer must agree on.
const TensorMeta& agreed_tensor(const OpRequestData& r) {
  bool out_is_data = (r.op.kind == OpKind::broadcast || r.op.kind == OpKind::scatter) && !r.root_from_data;
  return out_is_data ? r.output : r.input;
}

Status bad(std::string msg) { return {Errc::invalid_argument, std::move(msg)}; }

// The root as the caller passed it (a PeerId), unchecked: what an error names.
uint32_t given_root(const OpRequestData& r) { return static_cast<uint32_t>(r.op.root); }

std::string peer_list(const std::vector<int>& ps) {
  std::string s;
  for (std::size_t i = 0; i < ps.size(); ++i) s += (i ? ", " : "") + std::to_string(ps[i]);
  return s;
}

} // namespace

std::string peer_names(const std::vector<int>& peers) {
  return (peers.size() == 1 ? "peer " : "peers ") + peer_list(peers);
}

Status check_request(const OpRequestData& r, int n) {
  const auto& I = r.input;
  const auto& O = r.output;
  const std::string who = "peer " + std::to_string(r.peer) + ": ";
  const std::size_t nn = static_cast<std::size_t>(n);
  auto need = [&](const TensorMeta& t, const char* what) -> Status {
    if (!t.present) return bad(who + what + " buffer is missing");
    return Status::ok();
  };
  auto same_dtype = [&]() -> Status {
    if (I.present && O.present && I.dtype != O.dtype)
      return Status(Errc::dtype_mismatch, who + "input is " + I.describe() + " but output is " + O.describe());
    return Status::ok();
  };
  if (reduces(r.op.kind)) {
    if (!I.present) return bad(who + "input buffer is missing");
    if (!reduce_op_valid(I.dtype, r.op.redop))
      return bad(who + "reduce op " + std::string(to_string(r.op.redop)) + " is not defined for " +
                 std::string(to_string(I.dtype)) + " (bitwise ops need an integer type)");
  }
  if (rooted(r.op.kind) && !by_data(r) && given_root(r) >= static_cast<uint32_t>(n))
    return bad(who + "root " + std::to_string(given_root(r)) + " is not a peer (group of " + std::to_string(n) + ")");
  if (auto s = same_dtype(); !s) return s;
  const bool is_root = r.rank == given_root(r);
  switch (r.op.kind) {
    case OpKind::barrier: return Status::ok();
    case OpKind::all_reduce:
      if (O.present && O.numel() != I.numel())
        return bad(who + "output " + O.describe() + " does not match input " + I.describe());
      return Status::ok();
    case OpKind::reduce:
      if (is_root && O.present && O.numel() != I.numel())
        return bad(who + "output " + O.describe() + " does not match input " + I.describe());
      return Status::ok();
    case OpKind::broadcast:
      if (by_data(r)) return Status::ok();
      return need(O, "broadcast");
    case OpKind::all_gather:
      if (auto s = need(I, "input"); !s) return s;
      if (auto s = need(O, "output"); !s) return s;
      if (O.numel() != nn * I.numel())
        return bad(who + "all_gather output " + O.describe() + " must hold " + std::to_string(n) +
                   " x " + std::to_string(I.numel()) + " elements");
      return Status::ok();
    case OpKind::reduce_scatter:
      if (auto s = need(O, "output"); !s) return s;
      if (I.numel() != nn * O.numel())
        return bad(who + "reduce_scatter input " + I.describe() + " must hold " + std::to_string(n) +
                   " x output " + O.describe());
      return Status::ok();
    case OpKind::all_to_all:
      if (auto s = need(I, "input"); !s) return s;
      if (auto s = need(O, "output"); !s) return s;
      if (I.numel() % nn != 0 || O.numel() != I.numel())
        return bad(who + "all_to_all input " + I.describe() + " and output " + O.describe() +
                   " must have the same size, divisible by " + std::to_string(n));
      return Status::ok();
    case OpKind::gather:
      if (auto s = need(I, "input"); !s) return s;
      if (is_root && (!O.present || O.numel() != nn * I.numel()))
        return bad(who + "gather output on the root " + O.describe() + " must hold " +
                   std::to_string(n) + " x " + std::to_string(I.numel()) + " elements");
      return Status::ok();
    case OpKind::scatter:
      if (by_data(r)) {
        if (I.present && I.numel() % nn != 0)
          return bad(who + "scatter data " + I.describe() + " does not split into " + std::to_string(n) + " equal parts");
        return Status::ok();
      }
      if (auto s = need(O, "output"); !s) return s;
      if (is_root && (!I.present || I.numel() != nn * O.numel()))
        return bad(who + "scatter input on the root " + I.describe() + " must hold " +
                   std::to_string(n) + " x output " + O.describe());
      return Status::ok();
    case OpKind::send:
    case OpKind::recv: return Status::ok();
  }
  return Status::ok();
}

Status check_agreement(const std::vector<const OpRequestData*>& reqs, int n, OpShape& shape) {
  const OpRequestData& first = *reqs[0];
  for (auto* r : reqs)
    if (r->op.kind != first.op.kind)
      return {Errc::op_mismatch, "peer " + std::to_string(first.peer) + " called " +
                                     std::string(to_string(first.op.kind)) + " but peer " +
                                     std::to_string(r->peer) + " called " + std::string(to_string(r->op.kind))};
  for (auto* r : reqs)
    if (auto s = check_request(*r, n); !s) return s;
  for (auto* r : reqs)
    if (r->root_from_data != first.root_from_data)
      return {Errc::op_mismatch, "peers " + std::to_string(first.peer) + " and " + std::to_string(r->peer) +
                                     " mix the by-root and by-data forms of " + std::string(to_string(first.op.kind))};
  shape.kind = first.op.kind;
  shape.group = first.op.group;
  shape.seq = first.op.seq;
  shape.root = 0;
  shape.redop = first.op.redop;
  const bool data_form = by_data(first);
  const OpRequestData* source = &first;
  if (data_form) {
    std::vector<int> sources;
    for (auto* r : reqs)
      if (r->input.present) sources.push_back(static_cast<int>(r->rank));
    if (sources.empty())
      return {Errc::no_data, "no peer supplied the data (all " + std::to_string(n) + " peers passed none)"};
    if (sources.size() > 1)
      return {Errc::multiple_data, "peers " + peer_list(sources) + " all supplied data; exactly one may"};
    shape.root = sources[0];
    source = reqs[sources[0]];
  } else if (rooted(first.op.kind)) {
    for (auto* r : reqs)
      if (r->op.root != first.op.root)
        return {Errc::root_mismatch, "peer " + std::to_string(first.peer) + " names root " +
                                         std::to_string(given_root(first)) + " but peer " + std::to_string(r->peer) +
                                         " names root " + std::to_string(given_root(*r))};
    shape.root = first.op.root;
  }
  if (reduces(first.op.kind))
    for (auto* r : reqs)
      if (r->op.redop != first.op.redop)
        return {Errc::reduce_op_mismatch, "peer " + std::to_string(first.peer) + " reduces with " +
                                              std::string(to_string(first.op.redop)) + " but peer " +
                                              std::to_string(r->peer) + " with " + std::string(to_string(r->op.redop))};
  if (first.op.kind != OpKind::barrier && !data_form) {
    const TensorMeta& a = agreed_tensor(first);
    for (auto* r : reqs) {
      const TensorMeta& b = agreed_tensor(*r);
      if (b.dtype != a.dtype)
        return {Errc::dtype_mismatch, "peer " + std::to_string(first.peer) + " has " + a.describe() +
                                          " but peer " + std::to_string(r->peer) + " has " + b.describe()};
      if (b.shape != a.shape)
        return {Errc::shape_mismatch, "peer " + std::to_string(first.peer) + " has " + a.describe() +
                                          " but peer " + std::to_string(r->peer) + " has " + b.describe()};
    }
  }
  const std::size_t nn = static_cast<std::size_t>(n);
  shape.dtype = data_form ? source->input.dtype : agreed_tensor(first).dtype;
  if (!data_form) shape.agreed_shape = agreed_tensor(first).shape;
  shape.out_dtype = shape.dtype;
  switch (first.op.kind) {
    case OpKind::all_reduce:
    case OpKind::reduce:
    case OpKind::all_gather:
    case OpKind::gather: shape.count = first.input.numel(); break;
    case OpKind::reduce_scatter: shape.count = first.output.numel(); break;
    case OpKind::all_to_all: shape.count = first.input.numel() / nn; break;
    case OpKind::broadcast:
      shape.count = data_form ? source->input.numel() : first.output.numel();
      shape.out_shape = source->input.shape;
      break;
    case OpKind::scatter:
      if (data_form) {
        shape.count = source->input.numel() / nn;
        const Shape& s = source->input.shape;
        if (!s.empty() && s[0] == n) shape.out_shape = Shape(s.begin() + 1, s.end());
        else shape.out_shape = {static_cast<int64_t>(shape.count)};
      } else {
        shape.count = first.output.numel();
      }
      break;
    default: shape.count = 0; break;
  }
  return Status::ok();
}

} // namespace chorus
