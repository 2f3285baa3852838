// The blocking Peer API's entry points: the handle's identity and the fixed-size ops. Each one
// builds its request and runs it (run_op.hpp); groups, the by-data forms, object collectives and
// finish live in the files named for them.
#include <chorus/peer.hpp>

#include "actors/global_client/global_client.hpp"
#include "actors/peer/run_op.hpp"

namespace chorus {

using peer_impl::bytes;
using peer_impl::collective;
using peer_impl::make_op;

PeerId Peer::id() const { return state_ ? state_->offset + state_->id : 0; }
uint32_t Peer::size() const { return state_ ? static_cast<uint32_t>(state_->members.size()) : 0; }
uint32_t Peer::rank() const { return state_ ? state_->rank : 0; }
uint32_t Peer::group() const { return state_ ? state_->group : 0; }
std::vector<PeerId> Peer::members() const { return state_ ? state_->members : std::vector<PeerId>{}; }
std::string Peer::last_strategy() const {
  return state_ ? to_string(unpack_strategy(state_->last_strategy.load(std::memory_order_relaxed))) : std::string();
}

Status Peer::all_reduce(Tensor& inout, ReduceOp op) { return all_reduce(inout, inout, op); }
Status Peer::all_reduce(const Tensor& in, Tensor& out, ReduceOp op) {
  return collective(state_.get(), make_op(OpKind::all_reduce, op), in, out);
}

Status Peer::reduce(Tensor& inout, ReduceOp op, PeerId root) { return reduce(inout, inout, op, root); }
Status Peer::reduce(const Tensor& in, Tensor& out, ReduceOp op, PeerId root) {
  // Only the root receives; elsewhere the output is not touched (the work buffer is scratch).
  bool is_root = state_ && state_->rank == root;
  Tensor none;
  return collective(state_.get(), make_op(OpKind::reduce, op, root), in, is_root ? out : none);
}

Status Peer::broadcast(Tensor& buf, PeerId root) {
  bool is_root = state_ && state_->rank == root;
  Tensor none;
  return collective(state_.get(), make_op(OpKind::broadcast, ReduceOp::sum, root), is_root ? buf : none, buf);
}

Status Peer::all_gather(const Tensor& in, Tensor& out) {
  return collective(state_.get(), make_op(OpKind::all_gather), in, out);
}

Status Peer::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  return collective(state_.get(), make_op(OpKind::reduce_scatter, op), in, out);
}

Status Peer::all_to_all(const Tensor& in, Tensor& out) {
  return collective(state_.get(), make_op(OpKind::all_to_all), in, out);
}

Status Peer::gather(const Tensor& in, Tensor& out, PeerId root) {
  bool is_root = state_ && state_->rank == root;
  Tensor none;
  return collective(state_.get(), make_op(OpKind::gather, ReduceOp::sum, root), in, is_root ? out : none);
}

Status Peer::scatter(const Tensor& in, Tensor& out, PeerId root) {
  bool is_root = state_ && state_->rank == root;
  Tensor none;
  return collective(state_.get(), make_op(OpKind::scatter, ReduceOp::sum, root), is_root ? in : none, out);
}

Status Peer::barrier() {
  Tensor none;
  return collective(state_.get(), make_op(OpKind::barrier), none, none);
}

namespace {
// Whether a group-0 peer lives on another node (multi-node mode): send/recv to it go over the
// global client's data connection instead of the local server.
bool on_other_node(const PeerState& s, PeerId other) {
  if (!s.global || other >= s.members.size()) return false;
  return s.global->node_of(s.members[other]) != s.global->node_id();
}
} // namespace

Status Peer::send(const Tensor& t, PeerId dst, uint64_t tag) {
  if (!state_) return peer_impl::no_peer();
  if (on_other_node(*state_, dst)) return peer_impl::send_to_node(*state_, t, dst, tag);
  OpRequestData req = make_op(OpKind::send);
  req.other = dst;
  req.tag = tag;
  Status st;
  peer_impl::OpRecord rec;
  auto reply = peer_impl::request(*state_, rec, req, t, Tensor(), st);
  if (!st) return st;
  // The sender is rank 0 of a two-peer broadcast, in place: its buffer is only read.
  return peer_impl::execute(*state_, rec, *reply, bytes(t), bytes(t));
}

Status Peer::recv(Tensor& t, PeerId src, uint64_t tag) {
  if (!state_) return peer_impl::no_peer();
  if (on_other_node(*state_, src)) return peer_impl::recv_from_node(*state_, t, src, tag);
  OpRequestData req = make_op(OpKind::recv);
  req.other = src;
  req.tag = tag;
  Status st;
  peer_impl::OpRecord rec;
  auto reply = peer_impl::request(*state_, rec, req, Tensor(), t, st);
  if (!st) return st;
  return peer_impl::execute(*state_, rec, *reply, nullptr, bytes(t));
}

} // namespace chorus
