// Broadcast and scatter by data: exactly one peer passes the data and becomes the root; every
// peer gets the result back. In one process the server sees who passed data and tells the
// receivers the shape to allocate; across nodes the peers first exchange what they hold.
#include "runtime/peer/op_lanes.hpp"
#include "runtime/peer/run_op.hpp"

namespace chorus {

namespace peer_impl {

namespace {

// Across nodes the server cannot see which peer holds the data, so every peer first learns every
// peer's (has data, dtype, shape) with one all-gather, decides the root the same way, and then
// runs the rooted op. Every peer reaches the same verdict from the same table.
Result<Tensor> by_data_across_nodes(PeerState& s, OpKind kind, std::optional<Tensor> data) {
  constexpr std::size_t kMaxDims = 8, kWidth = 3 + kMaxDims;  // has, dtype, ndim, dims
  const uint32_t n = static_cast<uint32_t>(s.members.size());
  std::vector<int64_t> mine(kWidth, 0);
  if (data) {
    mine[0] = data->shape().size() > kMaxDims ? 2 : 1;
    mine[1] = static_cast<int64_t>(data->dtype());
    mine[2] = static_cast<int64_t>(std::min(data->shape().size(), kMaxDims));
    for (std::size_t d = 0; d < static_cast<std::size_t>(mine[2]); ++d) mine[3 + d] = data->shape()[d];
  }
  Tensor in = Tensor::from(mine);
  Tensor table = Tensor::zeros(DType::i64, {static_cast<int64_t>(n * kWidth)});
  if (auto st = collective(&s, make_op(OpKind::all_gather), in, table); !st) return st;
  const int64_t* t = table.data_as<int64_t>();
  std::vector<int> sources;
  for (uint32_t r = 0; r < n; ++r)
    if (t[r * kWidth] != 0) sources.push_back(static_cast<int>(r));
  const std::string what(to_string(kind));
  if (sources.empty())
    return Status(Errc::no_data, what + " by data: no peer supplied the data (all " + std::to_string(n) + " peers passed none)");
  if (sources.size() > 1) {
    std::string list;
    for (std::size_t i = 0; i < sources.size(); ++i) list += (i ? ", " : "") + std::to_string(sources[i]);
    return Status(Errc::multiple_data, what + " by data: peers " + list + " all supplied data; exactly one may");
  }
  const uint32_t root = static_cast<uint32_t>(sources[0]);
  const int64_t* row = t + root * kWidth;
  if (row[0] == 2)
    return Status(Errc::invalid_argument, what + " by data: peer " + std::to_string(root) + "'s data has more than " +
                                              std::to_string(kMaxDims) + " dimensions");
  const DType dtype = static_cast<DType>(row[1]);
  Shape shape(row + 3, row + 3 + row[2]);
  std::size_t numel = 1;
  for (auto d : shape) numel *= static_cast<std::size_t>(d);
  if (kind == OpKind::broadcast) {
    Tensor out = s.rank == root ? *data : Tensor::zeros(dtype, shape);
    Tensor none;
    if (auto st = collective(&s, make_op(OpKind::broadcast, ReduceOp::sum, root), s.rank == root ? out : none, out); !st)
      return st;
    return out;
  }
  if (numel % n != 0)
    return Status(Errc::invalid_argument, "scatter by data: peer " + std::to_string(root) + "'s data " +
                                              std::string(to_string(dtype)) + "[" + std::to_string(numel) +
                                              "] does not split into " + std::to_string(n) + " equal parts");
  Shape part = (!shape.empty() && shape[0] == static_cast<int64_t>(n)) ? Shape(shape.begin() + 1, shape.end())
                                                                         : Shape{static_cast<int64_t>(numel / n)};
  Tensor out = Tensor::zeros(dtype, part);
  Tensor in_root = s.rank == root ? *data : Tensor();
  if (auto st = collective(&s, make_op(OpKind::scatter, ReduceOp::sum, root), in_root, out); !st) return st;
  return out;
}

} // namespace

// Receivers learn the shape from the server's reply and allocate; the broadcast source keeps its
// own tensor as the result.
Result<Tensor> by_data(PeerState* s, OpKind kind, std::optional<Tensor> data) {
  if (!s) return no_peer();
  if (data && data->is_cuda()) return staged_by_data(*s, kind, *data);
  if (s->global) return by_data_across_nodes(*s, kind, std::move(data));
  OpRequestData req = make_op(kind);
  req.root_from_data = true;
  Tensor in = data ? *data : Tensor();
  Status st;
  OpRecord rec;
  auto reply = request(*s, rec, req, in, Tensor(), st);
  if (!st) return st;
  Tensor out = (data && kind == OpKind::broadcast) ? *data : Tensor::zeros(reply->out_dtype, reply->out_shape);
  if (auto e = execute(*s, rec, *reply, bytes(in), bytes(out)); !e) return e;
  return out;
}

} // namespace peer_impl

namespace {
// The by-data forms as a lane's op: the tensor it delivers is the Work's result.
peer_impl::OpBody by_data_body(PeerState* s, OpKind kind, std::optional<Tensor> data) {
  return [s, kind, data = std::move(data)](WorkState& w) {
    auto got = peer_impl::by_data(s, kind, data);
    if (!got) return got.status();
    w.tensors.push_back(std::move(*got));
    return Status::ok();
  };
}
} // namespace

Result<Tensor> Peer::broadcast(std::optional<Tensor> data) {
  return peer_impl::in_lane<Result<Tensor>>(state_, [&] { return peer_impl::by_data(state_.get(), OpKind::broadcast, std::move(data)); });
}
Result<Tensor> Peer::scatter(std::optional<Tensor> data) {
  return peer_impl::in_lane<Result<Tensor>>(state_, [&] { return peer_impl::by_data(state_.get(), OpKind::scatter, std::move(data)); });
}

Work Peer::broadcast_async(std::optional<Tensor> data, OpOptions o) {
  return peer_impl::run_async(state_, peer_impl::LaneKey::collective(), o,
                              by_data_body(state_.get(), OpKind::broadcast, std::move(data)));
}
Work Peer::scatter_async(std::optional<Tensor> data, OpOptions o) {
  return peer_impl::run_async(state_, peer_impl::LaneKey::collective(), o,
                              by_data_body(state_.get(), OpKind::scatter, std::move(data)));
}

} // namespace chorus
