// Collectives over payloads whose size differs per peer, built from the fixed-size ones: first
// every peer's header (dtype and shape) travels, then the payloads padded to the largest.
#include <algorithm>
#include <cstring>

#include <chorus/peer.hpp>
#include "runtime/peer/op_lanes.hpp"
#include "cuda/staging.hpp"

namespace chorus {

namespace {

constexpr int kMaxDims = 8;
constexpr int kHeader = 2 + kMaxDims;  // dtype, ndim, dims

Tensor header_of(const Tensor& t) {
  std::vector<int64_t> h(kHeader, 0);
  h[0] = static_cast<int64_t>(t.dtype());
  h[1] = static_cast<int64_t>(t.shape().size());
  for (std::size_t i = 0; i < t.shape().size() && i < kMaxDims; ++i) h[2 + i] = t.shape()[i];
  return Tensor::from(h);
}

Shape shape_of(const int64_t* h) { return Shape(h + 2, h + 2 + h[1]); }

std::size_t numel_of(const int64_t* h) {
  std::size_t n = 1;
  for (int64_t i = 0; i < h[1]; ++i) n *= static_cast<std::size_t>(h[2 + i]);
  return n;
}

// Checks the gathered headers agree on the dtype; returns the largest payload in bytes.
Status check_headers(const int64_t* hs, uint32_t n, std::size_t& max_bytes) {
  max_bytes = 0;
  for (uint32_t r = 0; r < n; ++r) {
    const int64_t* h = hs + r * kHeader;
    if (h[0] != hs[0])
      return {Errc::dtype_mismatch, "rank 0 has " + std::string(to_string(static_cast<DType>(hs[0]))) +
                                        " but rank " + std::to_string(r) + " has " +
                                        std::string(to_string(static_cast<DType>(h[0])))};
    max_bytes = std::max(max_bytes, numel_of(h) * dtype_size(static_cast<DType>(h[0])));
  }
  return Status::ok();
}

Tensor padded_bytes(const Tensor& in, std::size_t max_bytes) {
  Tensor p = Tensor::zeros(DType::u8, {static_cast<int64_t>(max_bytes)});
  if (in.nbytes()) std::memcpy(p.data(), in.data(), in.nbytes());
  return p;
}

std::vector<Tensor> unpack(const int64_t* hs, const uint8_t* all, uint32_t n, std::size_t max_bytes) {
  std::vector<Tensor> out;
  for (uint32_t r = 0; r < n; ++r) {
    const int64_t* h = hs + r * kHeader;
    Tensor t = Tensor::zeros(static_cast<DType>(h[0]), shape_of(h));
    if (t.nbytes()) std::memcpy(t.data(), all + r * max_bytes, t.nbytes());
    out.push_back(std::move(t));
  }
  return out;
}

Status too_many_dims(const Tensor& in) {
  return {Errc::invalid_argument, "tensor " + in.describe() + " has more than " + std::to_string(kMaxDims) + " dimensions"};
}

// Every peer learns every peer's header (and so the largest payload to pad to). A peer with too
// many dimensions (ndim -1) or whose GPU tensor could not be staged (`staged` not ok, ndim -2)
// still joins the exchange, so every peer fails together instead of the others waiting for it.
Status exchange_headers(Peer& p, const Tensor& in, Tensor& hs, std::size_t& max_bytes, const Status& staged) {
  Tensor h = header_of(in);
  if (in.shape().size() > kMaxDims) h.data_as<int64_t>()[1] = -1;
  if (!staged) h.data_as<int64_t>()[1] = -2;
  const uint32_t n = p.size();
  hs = Tensor::zeros(DType::i64, {static_cast<int64_t>(n) * kHeader});
  if (auto s = p.all_gather(h, hs); !s) return s;
  const int64_t* hv = hs.data_as<int64_t>();
  for (uint32_t r = 0; r < n; ++r) {
    if (hv[r * kHeader + 1] == -2)  // the same words on every rank (the cause is only known at r)
      return Status(Errc::device_error, "rank " + std::to_string(r) + " could not copy its GPU tensor to the host");
    if (hv[r * kHeader + 1] < 0)
      return r == p.rank() ? too_many_dims(in)
                           : Status(Errc::invalid_argument, "rank " + std::to_string(r) + "'s tensor has more than 8 dimensions");
  }
  return check_headers(hv, n, max_bytes);
}

// What both variable-size gathers begin with: the input in host memory (GPU tensors are gathered
// through it; the results are host tensors) and every peer's header, from every peer.
struct Exchanged {
  Tensor in;
  Tensor headers;
  std::size_t max_bytes = 0;
  const int64_t* header_words() const { return headers.data_as<int64_t>(); }
};

Status stage_and_exchange(Peer& p, const Tensor& gin, Exchanged& x) {
  const Status staged = stage_to_host(gin, x.in);
  return exchange_headers(p, x.in, x.headers, x.max_bytes, staged);
}

Result<std::vector<Tensor>> all_gather_v_of(Peer& p, const Tensor& gin) {
  Exchanged x;
  if (auto s = stage_and_exchange(p, gin, x); !s) return s;
  const uint32_t n = p.size();
  Tensor all = Tensor::zeros(DType::u8, {static_cast<int64_t>(n * x.max_bytes)});
  if (auto s = p.all_gather(padded_bytes(x.in, x.max_bytes), all); !s) return s;
  return unpack(x.header_words(), all.data_as<uint8_t>(), n, x.max_bytes);
}

Result<std::vector<Tensor>> gather_v_of(Peer& p, const Tensor& gin, PeerId root) {
  // Every peer needs the largest size to pad to, so the headers go to everyone.
  Exchanged x;
  if (auto s = stage_and_exchange(p, gin, x); !s) return s;
  const uint32_t n = p.size();
  Tensor all = Tensor::zeros(DType::u8, {static_cast<int64_t>(p.rank() == root ? n * x.max_bytes : 0)});
  if (auto s = p.gather(padded_bytes(x.in, x.max_bytes), all, root); !s) return s;
  if (p.rank() != root) return std::vector<Tensor>{};
  return unpack(x.header_words(), all.data_as<uint8_t>(), n, x.max_bytes);
}

Result<std::vector<std::string>> all_gather_object_of(Peer& p, const std::string& mine) {
  Tensor t = Tensor::borrow(const_cast<char*>(mine.data()), DType::u8, {static_cast<int64_t>(mine.size())});
  auto parts = all_gather_v_of(p, t);
  if (!parts) return parts.status();
  std::vector<std::string> out;
  for (auto& p : *parts) out.emplace_back(static_cast<const char*>(p.data()), p.nbytes());
  return out;
}

Result<std::string> broadcast_object_of(Peer& p, std::optional<std::string> data) {
  std::optional<Tensor> t;
  if (data) t = Tensor::borrow(data->data(), DType::u8, {static_cast<int64_t>(data->size())});
  auto got = p.broadcast(t);
  if (!got) return got.status();
  return std::string(static_cast<const char*>(got->data()), got->nbytes());
}

// The non-blocking forms' bodies: what the op gives back goes into its Work. (Each runs as one op
// of the handle's lane; its steps run inline there, one after another.)
void put(WorkState& w, std::vector<Tensor>& v) { w.tensors = std::move(v); }
void put(WorkState& w, std::vector<std::string>& v) { w.objects = std::move(v); }
void put(WorkState& w, std::string& v) { w.objects = {std::move(v)}; }

template <class F>
peer_impl::OpBody body_of(Peer self, F f) {
  return [self = std::move(self), f = std::move(f)](WorkState& w) mutable {
    auto got = f(self);
    if (!got) return got.status();
    put(w, *got);
    return Status::ok();
  };
}

} // namespace

Result<std::vector<Tensor>> Peer::all_gather_v(const Tensor& in) {
  return peer_impl::in_lane<Result<std::vector<Tensor>>>(state_, [&] { return all_gather_v_of(*this, in); });
}

Result<std::vector<Tensor>> Peer::gather_v(const Tensor& in, PeerId root) {
  return peer_impl::in_lane<Result<std::vector<Tensor>>>(state_, [&] { return gather_v_of(*this, in, root); });
}

Result<std::vector<std::string>> Peer::all_gather_object(const std::string& mine) {
  return peer_impl::in_lane<Result<std::vector<std::string>>>(state_, [&] { return all_gather_object_of(*this, mine); });
}

Result<std::string> Peer::broadcast_object(std::optional<std::string> data) {
  return peer_impl::in_lane<Result<std::string>>(state_, [&] { return broadcast_object_of(*this, std::move(data)); });
}

Work Peer::all_gather_v_async(const Tensor& in, OpOptions o) {
  return peer_impl::run_async(state_, peer_impl::LaneKey::collective(), o, body_of(*this, [in](Peer& p) { return all_gather_v_of(p, in); }));
}

Work Peer::gather_v_async(const Tensor& in, PeerId root, OpOptions o) {
  return peer_impl::run_async(state_, peer_impl::LaneKey::collective(), o, body_of(*this, [in, root](Peer& p) { return gather_v_of(p, in, root); }));
}

Work Peer::all_gather_object_async(std::string mine, OpOptions o) {
  return peer_impl::run_async(state_, peer_impl::LaneKey::collective(), o,
                              body_of(*this, [mine = std::move(mine)](Peer& p) { return all_gather_object_of(p, mine); }));
}

Work Peer::broadcast_object_async(std::optional<std::string> data, OpOptions o) {
  return peer_impl::run_async(state_, peer_impl::LaneKey::collective(), o,
                              body_of(*this, [data = std::move(data)](Peer& p) { return broadcast_object_of(p, data); }));
}

} // namespace chorus
