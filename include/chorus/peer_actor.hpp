// The actor-facing interface, for host apps that are themselves CAF actors: a peer actor owns one
// registered Peer and answers each OpCall with an OpDone, so an actor can `request` a collective
// and continue in its response handler instead of blocking a thread. A call is a plain struct with
// the buffers in it by reference: it never leaves the process, so nothing is encoded.
#pragma once
#include <caf/all.hpp>

#include <chorus/peer.hpp>
#include <chorus/runtime.hpp>

namespace chorus {

struct OpCall {
  OpKind kind = OpKind::barrier;
  ReduceOp redop = ReduceOp::sum;
  PeerId root = 0;   // reduce, broadcast, gather, scatter
  PeerId other = 0;  // send: the destination; recv: the source
  uint64_t tag = 0;  // send, recv
  Tensor input, output;

  static OpCall all_reduce(Tensor in, Tensor out, ReduceOp op);
  static OpCall reduce(Tensor in, Tensor out, ReduceOp op, PeerId root);
  static OpCall broadcast(Tensor buf, PeerId root);
  static OpCall all_gather(Tensor in, Tensor out);
  static OpCall reduce_scatter(Tensor in, Tensor out, ReduceOp op);
  static OpCall all_to_all(Tensor in, Tensor out);
  static OpCall gather(Tensor in, Tensor out, PeerId root);
  static OpCall scatter(Tensor in, Tensor out, PeerId root);
  static OpCall barrier();
  static OpCall send(Tensor t, PeerId dst, uint64_t tag = 0);
  static OpCall recv(Tensor t, PeerId src, uint64_t tag = 0);
};

struct OpDone {
  Status outcome;
  Tensor output;  // the buffer that holds the result (the call's output, or its input in place)
  const Status& status() const { return outcome; }
};

using peer_actor = caf::typed_actor<caf::replies_to<OpCall>::with<OpDone>>;

// Registers peer `id` (blocking the caller until the local server answers) and spawns its actor
// on its own thread. The actor finishes the peer when it exits.
Result<peer_actor> spawn_peer_actor(Runtime& rt, PeerId id, const Config& config);

// The actor system the runtime runs, for host apps that spawn their own actors into it.
caf::actor_system& actor_system_of(Runtime& rt);

} // namespace chorus

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(chorus::OpCall)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(chorus::OpDone)
