// What a peer actor does with each request, on the blocking Peer API (peer_actor.cpp adds the
// actor around it: registration, the gradient sync it owns, exit).
#pragma once
#include <chorus/peer_actor.hpp>

namespace chorus::peer_actor_calls {

ReadyDone ready(const Peer& p);
OpDone run(Peer& p, OpCall& c);
ByDataDone run(Peer& p, ByDataCall& c);
ObjectDone run(Peer& p, ObjectCall& c);
TensorsDone run(Peer& p, TensorsCall& c);
// Group creation; `destroy` is handled by the actor (it changes what its exit does).
Result<Peer> create_group(Peer& p, const GroupCall& c);

} // namespace chorus::peer_actor_calls
