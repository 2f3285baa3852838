// The local server actor: one per process, in the runtime's actor system. It takes the control
// messages of the node's peers (register, finish, reset) and feeds them to the LocalServerCore it
// shares with the peer threads, which enter the core directly with their op and group requests
// (a mailbox hop per op would cost a thread wake-up; see bench/mailbox_bench.cpp and the README's
// "The data path"). Answers go through each Call's reply slot, a word the waiting peer thread
// sleeps on, not through CAF responses: the thread wakes without the scheduler. Expiring a request
// is the waiter's job (it calls LocalServerCore::on_timeout once its deadline passes), so the actor
// arms no timers.
//
// Messages (the Call carries the Cap'n Proto control message, messages/peer_codec.hpp):
//   peer -> server  (register_atom, Call)  RegisterRequest: reply.epoch, or why not
//   peer -> server  (finish_atom, Call)    Finish
//   peer -> server  (reset_atom, Call)     Reset (peer UINT32_MAX: the runtime itself)
#pragma once
#include "actors/atoms.hpp"
#include "actors/local_server/call.hpp"

// A Call holds pointers into this process (buffers, the reply slot): it never leaves the process.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(chorus::Call)

namespace chorus {

class LocalServerCore;

using local_server_actor = caf::typed_actor<caf::reacts_to<register_atom, Call>, caf::reacts_to<finish_atom, Call>,
                                            caf::reacts_to<reset_atom, Call>>;

// The runtime spawns it detached (its own thread: registering never waits on the scheduler of a
// host app's system); the tests spawn the same behavior under CAF's deterministic scheduler.
local_server_actor::behavior_type local_server(local_server_actor::pointer self, std::shared_ptr<LocalServerCore> core);

} // namespace chorus
