// The actor-facing interface, for host apps that are themselves CAF actors. A peer actor owns one
// peer (or one group handle of it) and offers every op of the blocking Peer API as a request, so
// an actor can `request` a collective and continue in its response handler instead of blocking
// a thread:
//
//   auto peer = spawn_peer_actor(runtime, id, config);      // returns at once
//   self->request(peer, 10s, OpCall::all_reduce(t, t, ReduceOp::sum)).then([](const OpDone& d) {...});
//
// Each peer actor runs on a thread of its own (detached): the blocking calls never occupy a
// scheduler worker, and ops of other actors never wait behind them. It answers one request at a
// time, in mailbox order, so the k-th collective request it gets is its k-th collective op.
//
// Outcomes: every reply carries the op's Status (`done.status()`), like the blocking API's return
// value, so each peer of a failed op sees the same specific error. A caf::error in the response
// handler means the request itself went wrong (a request timeout, the actor gone).
//
// Registration: spawning returns at once and the actor registers on its own thread. Requests sent
// meanwhile wait in its mailbox. `ReadyCall` answers once registration is over (with the peer's
// identity); when it failed, ReadyCall and every later request are answered with that Status (e.g.
// config_mismatch, register_twice) and the actor stays up until it is told to exit.
//
// Exit: the actor finishes its peer when it exits (a group actor destroys its share of the
// group), before its monitors hear of the exit, so after a down_msg the peer is gone. Stop it with
// caf::send_exit(a, caf::exit_reason::user_shutdown) (or kill); the Runtime stops the peer actors
// it spawned that still run when it is destroyed. As with any detached CAF actor, drop the handles
// before the actor system ends: ~actor_system waits until the last one is gone.
//
// Messages are plain structs with the buffers in them by reference (Tensor handles): they never
// leave the process, so nothing is encoded.
#pragma once
#include <caf/all.hpp>

#include <optional>
#include <string>
#include <vector>

#include <chorus/grad_sync.hpp>
#include <chorus/peer.hpp>
#include <chorus/runtime.hpp>

namespace chorus {

// Waits for registration; the reply names the peer's place (for a group actor: in its group).
struct ReadyCall {};
struct ReadyDone {
  Status outcome;  // the registration's Status
  PeerId id = 0;   // the global peer id
  uint32_t rank = 0, size = 0, group = 0, node = 0;
  std::vector<PeerId> members;
  const Status& status() const { return outcome; }
};

// The fixed-size ops: every collective, and send/recv.
struct OpCall {
  OpKind kind = OpKind::barrier;
  ReduceOp redop = ReduceOp::sum;
  PeerId root = 0;   // reduce, broadcast, gather, scatter
  PeerId other = 0;  // send: the destination; recv: the source
  uint64_t tag = 0;  // send, recv
  Tensor input, output;
  bool any_source = false;  // recv_any: from whichever rank sends first (`other` unused)

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
  static OpCall recv_any(Tensor t, uint64_t tag = 0);  // Peer::recv_any; OpDone::source names the sender
};
struct OpDone {
  Status outcome;
  Tensor output;  // the buffer that holds the result (the call's output, or its input in place)
  PeerId source = 0;  // recv, recv_any: the rank it received from
  const Status& status() const { return outcome; }
};

// Broadcast or scatter by data: exactly one peer passes data (see Peer::broadcast(optional)).
struct ByDataCall {
  OpKind kind = OpKind::broadcast;  // broadcast or scatter
  std::optional<Tensor> data;
  static ByDataCall broadcast(std::optional<Tensor> data);
  static ByDataCall scatter(std::optional<Tensor> data);
};
struct ByDataDone {
  Status outcome;
  Tensor result;  // the broadcast tensor, or this peer's part of the scattered one
  const Status& status() const { return outcome; }
};

// Object collectives: payloads of different lengths per peer.
enum class ObjectOp : uint8_t { all_gather_object, broadcast_object };
struct ObjectCall {
  ObjectOp op = ObjectOp::all_gather_object;
  std::optional<std::string> data;  // all_gather_object: mine (always); broadcast_object: the source's
  static ObjectCall all_gather(std::string mine);
  static ObjectCall broadcast(std::optional<std::string> data);
};
struct ObjectDone {
  Status outcome;
  std::vector<std::string> objects;  // every rank's bytes in rank order; broadcast: one entry
  const Status& status() const { return outcome; }
};

// Tensors of any shape per peer (same dtype); a list all-reduced in as few ops as it allows.
enum class TensorsOp : uint8_t { all_gather_v, gather_v, all_reduce_coalesced };
struct TensorsCall {
  TensorsOp op = TensorsOp::all_gather_v;
  Tensor input;
  PeerId root = 0;           // gather_v
  std::vector<Tensor> list{};  // all_reduce_coalesced: reduced in place
  ReduceOp redop = ReduceOp::sum;
  static TensorsCall all_gather_v(Tensor in);
  static TensorsCall gather_v(Tensor in, PeerId root);
  static TensorsCall all_reduce_coalesced(std::vector<Tensor> list, ReduceOp redop);
};
struct TensorsDone {
  Status outcome;
  // By rank; gather_v off the root: empty; all_reduce_coalesced: the list (the caller's memory).
  std::vector<Tensor> tensors;
  const Status& status() const { return outcome; }
};

// Groups. The reply to a group creation is a new peer actor for the group handle (its own
// thread; ranks, roots and send/recv peers in its requests are ranks in the group). A negative
// split color, an inter_node call off a node's leader, and destroy answer with no actor.
enum class GroupOp : uint8_t { new_group, split, intra_node, inter_node, destroy };
struct GroupCall {
  GroupOp op = GroupOp::new_group;
  std::vector<PeerId> members;  // new_group: global ids, the same list on every member
  int color = 0, key = 0;       // split
  static GroupCall new_group(std::vector<PeerId> members);
  static GroupCall split(int color, int key);
  static GroupCall intra_node();
  static GroupCall inter_node();
  static GroupCall destroy();  // to a group actor: releases its share of the group
};
struct GroupDone;

// Gradient sync (chorus/grad_sync.hpp) owned by the actor: the first register_params creates its
// GradientSync with the call's options (later ones must pass the same options). Between the first
// submit of a step and its sync, other requests that run an op fail with invalid_argument: the
// sync owns the peer then.
enum class GradOp : uint8_t { register_params, submit, sync, reduced };
struct GradCall {
  GradOp op = GradOp::sync;
  std::vector<ParamSpec> params;  // register_params
  GradSyncOptions options;        // register_params
  uint64_t id = 0;                // submit, reduced
  Tensor grad;                    // submit: stays alive until the sync's reply
  static GradCall register_params(std::vector<ParamSpec> params, GradSyncOptions options = {});
  static GradCall submit(uint64_t id, Tensor grad);
  static GradCall sync();
  static GradCall reduced(uint64_t id);
};
struct GradDone {
  Status outcome;
  Tensor reduced;  // GradOp::reduced: the parameter's reduced gradient
  const Status& status() const { return outcome; }
};

using peer_actor = caf::typed_actor<caf::replies_to<ReadyCall>::with<ReadyDone>,
                                    caf::replies_to<OpCall>::with<OpDone>,
                                    caf::replies_to<ByDataCall>::with<ByDataDone>,
                                    caf::replies_to<ObjectCall>::with<ObjectDone>,
                                    caf::replies_to<TensorsCall>::with<TensorsDone>,
                                    caf::replies_to<GroupCall>::with<GroupDone>,
                                    caf::replies_to<GradCall>::with<GradDone>>;

struct GroupDone {
  Status outcome;
  peer_actor group;  // the new group's actor; null for destroy and when this peer joins no group
  const Status& status() const { return outcome; }
};

// Spawns the actor of peer `id` into the runtime's actor system and returns at once; the actor
// registers with `config` on its own thread (see "Registration" above).
peer_actor spawn_peer_actor(Runtime& rt, PeerId id, const Config& config);

} // namespace chorus

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(chorus::ReadyCall)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(chorus::ReadyDone)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(chorus::OpCall)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(chorus::OpDone)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(chorus::ByDataCall)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(chorus::ByDataDone)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(chorus::ObjectCall)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(chorus::ObjectDone)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(chorus::TensorsCall)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(chorus::TensorsDone)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(chorus::GroupCall)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(chorus::GroupDone)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(chorus::GradCall)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(chorus::GradDone)
