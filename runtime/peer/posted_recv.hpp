// A receive posted at its call, as MPI posts one: it enters where sends find it (the local
// server, the node's mailbox, or both for a receive from any source) in the step that takes its
// place in its lane (op_lanes.hpp, OpEntry). Of a handle's receives that may take one send (one
// tag; the same rank, or either from any source) the one called first takes it, and a lane's
// order is the order its receives entered. Its body (on the lane, or the caller's thread) then
// waits for the pairing or the message and copies (a small pair in one process was copied as it
// was paired: the body only learns so). Receives into GPU tensors, or ordered in a
// CUDA stream, enter when their body runs: a stream's earlier work may fail them before they
// start, and the local server must then hear it with the request (Call::local_error).
#pragma once
#include <cstdint>
#include <memory>

#include <chorus/status.hpp>
#include <chorus/tensor.hpp>
#include <chorus/types.hpp>
#include "actors/global_client/p2p.hpp"
#include "runtime/peer/run_op.hpp"

namespace chorus {
class GlobalClient;
}

namespace chorus::peer_impl {

struct PostedRecv {
  Status failed;                          // it could not enter: the body returns this
  OpRecord rec;
  std::shared_ptr<Reply> reply;           // the local server's answer, where it entered there
  std::shared_ptr<GlobalClient> global;   // keeps `mailbox`'s box alive (declared first: it goes last)
  std::unique_ptr<P2PMailbox::Posted> mailbox;  // its place in the node's mailbox, where it waits there
  uint64_t ticket() const { return mailbox ? mailbox->ticket() : 0; }
};

// Posts a receive into `t` with `tag`: from any source, or from rank `src` of the handle.
void post_recv(PeerState& s, PostedRecv& p, const Tensor& t, PeerId src, uint64_t tag, bool any);

// The local server's answer to a receive `req` into `t`: awaited where it was posted at its call
// (`posted`, its timeout counting from now), else requested now (null: `status` says why).
std::shared_ptr<Reply> server_answer(PeerState& s, OpRecord& rec, PostedRecv* posted, const OpRequestData& req,
                                     const Tensor& t, Status& status);

} // namespace chorus::peer_impl
