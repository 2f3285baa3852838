// A send or receive posted at its call, as MPI posts one: it enters where its partner finds it
// (the local server; for a receive also the node's mailbox, or both for a receive from any
// source) in the step that takes its place in its lane (op_lanes.hpp, OpEntry). Of a handle's
// receives that may take one send (one tag; the same rank, or either from any source) the one
// called first takes it, and a lane's order is the order its ops entered. Its body (on the lane,
// or the caller's thread) then waits for the pairing or the message and copies. A small pair in
// one process is copied as it is paired, so the second of the two is done at its call (done()):
// it takes no task on its lane. Ops on GPU tensors, ordered in a CUDA stream, sends to another
// node and sends above CHORUS_P2P_LOCAL_EAGER_KIB enter when their body runs: a stream's earlier
// work may fail them before they start, and the local server must then hear it with the request
// (Call::local_error); a send to another node blocks in its body; a larger send's plan counts its
// deadline from its start (runtime/peer/peer.cpp, P2pCall).
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

struct PostedOp {
  Status failed;                          // it could not enter: the body returns this
  OpRecord rec;
  std::shared_ptr<Reply> reply;           // the local server's answer, where it entered there
  std::shared_ptr<GlobalClient> global;   // keeps `mailbox`'s box alive (declared first: it goes last)
  std::unique_ptr<P2PMailbox::Posted> mailbox;  // its place in the node's mailbox, where it waits there
  uint64_t ticket() const { return mailbox ? mailbox->ticket() : 0; }
  // Nothing is left to wait for: it could not enter, or the server already answered with a pair
  // copied as it was paired or with an error (not a plan, which its body runs), and no mailbox
  // waits for it.
  bool done() const;
};

// Posts a send of `t` to rank `dst` of the handle (on this node) with `tag`.
void post_send(PeerState& s, PostedOp& p, const Tensor& t, PeerId dst, uint64_t tag);

// Posts a receive into `t` with `tag`: from any source, or from rank `src` of the handle.
void post_recv(PeerState& s, PostedOp& p, const Tensor& t, PeerId src, uint64_t tag, bool any);

// The local server's answer to a send or receive `req` (of `in`, into `out`): awaited where it was
// posted at its call (`posted`, its timeout counting from now), else requested now (null:
// `status` says why).
std::shared_ptr<Reply> server_answer(PeerState& s, OpRecord& rec, PostedOp* posted, const OpRequestData& req,
                                     const Tensor& in, const Tensor& out, Status& status);

} // namespace chorus::peer_impl
