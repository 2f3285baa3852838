// Leaving the collective: the world handle tells the local server this peer is done. Once every
// peer has finished, the collective is over and a new one may register.
#include "runtime/peer/op_lanes.hpp"
#include "runtime/peer/run_op.hpp"
#include "runtime/runtime_impl.hpp"
#include "messages/peer_codec.hpp"

namespace chorus {

Status Peer::finish_now() {
  if (!state_) return peer_impl::no_peer();
  if (state_->group != 0)
    return {Errc::invalid_argument, "finish() leaves the collective: call it on the world handle "
                                    "(a group is released with destroy())"};
  if (state_->finished)
    return {Errc::unregister_twice, "peer " + std::to_string(state_->id) + " finished twice"};
  Call call;
  call.message = encode_peer_only(state_->id, false, state_->epoch);
  Status s = state_->rt->submit(finish_atom::value, call, state_->config.timeout);
  if (s) state_->finished = true;
  return s;
}

// After every op of the world handle handed in before it: its sends and receives, then its lane.
Status Peer::finish() {
  if (auto e = peer_impl::wait_for_p2p(state_.get()); !e) return e;
  return peer_impl::run_now(state_, peer_impl::LaneKey::collective(), [&](WorkState&) { return finish_now(); });
}

} // namespace chorus
