// The API a peer calls. Every op has a blocking form, which returns when this peer's part of the op
// is done with a Status naming what went wrong otherwise, and a non-blocking one, named with
// `_async`, which returns a Work at once (chorus/work.hpp); the blocking form is that Work's
// wait(). A Peer comes from Runtime::register_peer; its id is its rank, in [0, num_devices). Ops
// are matched across peers by their order: the k-th collective call of every peer (blocking or
// not) belongs to the same op. Ops of one handle start in call order; ops of different handles
// (the world and its groups) run concurrently; send and recv of different (peer, tag) pairs too.
// The buffers of a non-blocking op must stay alive, and untouched, until its Work is done.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <chorus/result.hpp>
#include <chorus/status.hpp>
#include <chorus/tensor.hpp>
#include <chorus/work.hpp>

namespace chorus {

struct PeerState;

class Peer {
 public:
  Peer() = default;
  PeerId id() const;      // the global peer id
  uint32_t size() const;  // peers in this handle's group (the world: every peer)
  uint32_t rank() const;  // my index in this handle's group; roots and send/recv peers are ranks
  uint32_t group() const; // 0 for the world
  std::vector<PeerId> members() const;  // global ids; rank i is members()[i]
  // What ran this handle's last op: a host schedule ("centralized", "direct", "ring", "tree:2",
  // "oneshot", "hier+oneshot" for one leader per node, ...), "p2p" (send/recv), "nccl" or "device"
  // (GPU tensors); empty before the first op.
  std::string last_strategy() const;

  // out = reduction over peers of in. out may be omitted (or be in) for in place.
  Status all_reduce(Tensor& inout, ReduceOp op);
  Status all_reduce(const Tensor& in, Tensor& out, ReduceOp op);
  // The reduction lands in root's out (root's inout when in place); other peers' buffers are unchanged.
  Status reduce(Tensor& inout, ReduceOp op, PeerId root);
  Status reduce(const Tensor& in, Tensor& out, ReduceOp op, PeerId root);
  // Rooted: root's buf is the data, every other peer's buf (same shape) receives it.
  Status broadcast(Tensor& buf, PeerId root);
  // By data: exactly one peer passes the data (it is the root); every peer gets the tensor back.
  Result<Tensor> broadcast(std::optional<Tensor> data);
  // out (n x in.numel() elements) = the inputs of peers 0..n-1, in rank order.
  Status all_gather(const Tensor& in, Tensor& out);
  // out (in.numel()/n elements) = block `rank` of the reduction of every peer's in.
  Status reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op);
  // Block j of my in goes to peer j; block i of my out comes from peer i.
  Status all_to_all(const Tensor& in, Tensor& out);
  // root's out (n x in.numel()) = everyone's in, in rank order; out is ignored on other peers.
  Status gather(const Tensor& in, Tensor& out, PeerId root);
  // Peer i's out = block i of root's in; in is ignored on other peers.
  Status scatter(const Tensor& in, Tensor& out, PeerId root);
  // By data: exactly one peer passes data (first dimension n, or numel divisible by n).
  Result<Tensor> scatter(std::optional<Tensor> data);
  // Returns once every peer has called barrier.
  Status barrier();
  // Point to point, matched FIFO per (source, destination, tag); both block until the copy is done.
  // A receive that fails may have had some of its tensor written (as MPI's may).
  Status send(const Tensor& t, PeerId dst, uint64_t tag = 0);
  Status recv(Tensor& t, PeerId src, uint64_t tag = 0);
  // A receive from any rank (MPI_ANY_SOURCE; torch's recv without src): takes the first send to
  // this peer with `tag` from whichever rank of the handle's group, and returns that rank. Within
  // a node a send goes to the receive posted first of those that may take it (from its rank, or
  // from any); the sends of one rank with one tag are taken in the order sent. Across nodes, see
  // docs/work.md.
  Result<PeerId> recv_any(Tensor& t, uint64_t tag = 0);
  // Leaves the collective, once every op of the world handle handed in before it is done (its
  // sends and receives included); further ops fail with Errc::finished.
  Status finish();

  // The non-blocking forms: the same ops, each returning a Work at once; `opts` may give the op a
  // timeout of its own. Work::result() holds the output buffer (the tensor a by-data form made,
  // every rank's tensor of the _v forms); Work::objects() the object collectives' bytes.
  Work all_reduce_async(Tensor& inout, ReduceOp op, OpOptions opts = {});
  Work all_reduce_async(const Tensor& in, Tensor& out, ReduceOp op, OpOptions opts = {});
  Work reduce_async(Tensor& inout, ReduceOp op, PeerId root, OpOptions opts = {});
  Work reduce_async(const Tensor& in, Tensor& out, ReduceOp op, PeerId root, OpOptions opts = {});
  Work broadcast_async(Tensor& buf, PeerId root, OpOptions opts = {});
  Work broadcast_async(std::optional<Tensor> data, OpOptions opts = {});
  Work all_gather_async(const Tensor& in, Tensor& out, OpOptions opts = {});
  Work reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op, OpOptions opts = {});
  Work all_to_all_async(const Tensor& in, Tensor& out, OpOptions opts = {});
  Work gather_async(const Tensor& in, Tensor& out, PeerId root, OpOptions opts = {});
  Work scatter_async(const Tensor& in, Tensor& out, PeerId root, OpOptions opts = {});
  Work scatter_async(std::optional<Tensor> data, OpOptions opts = {});
  Work barrier_async(OpOptions opts = {});
  Work send_async(const Tensor& t, PeerId dst, uint64_t tag = 0, OpOptions opts = {});
  Work recv_async(Tensor& t, PeerId src, uint64_t tag = 0, OpOptions opts = {});
  Work recv_any_async(Tensor& t, uint64_t tag = 0, OpOptions opts = {});  // Work::source(): the sender
  Work all_gather_object_async(std::string mine, OpOptions opts = {});
  Work broadcast_object_async(std::optional<std::string> data, OpOptions opts = {});
  Work all_gather_v_async(const Tensor& in, OpOptions opts = {});
  Work gather_v_async(const Tensor& in, PeerId root, OpOptions opts = {});

  // Groups. A group is a handle like this one whose ops run among its members only, with ranks
  // renumbered 0..size()-1 in member order. Groups of any membership run ops concurrently without
  // mixing (every op is identified by group and sequence number).
  // Collective over `members` (global ids, every member passes the same list, the caller among them).
  Result<Peer> new_group(std::vector<PeerId> members);
  // Collective over this handle's group (like MPI_Comm_split): peers with the same color form a
  // group, ordered by key then by rank here. A negative color joins none (an empty handle, ok).
  Result<Peer> split(int color, int key);
  // Releases this member's share of the group; ops on it then fail. Not for the world (use finish).
  Status destroy();
  // Hierarchical communicators of this handle's group (each call is collective over the group,
  // like split): the members on my node, and the inter-node group of one leader per node (the
  // lowest rank of each node; other members get an empty handle). In one process the intra-node
  // group is the whole group and the inter-node group is its rank 0 alone.
  Result<Peer> intra_node();
  Result<Peer> inter_node();
  uint32_t node() const;  // this peer's node id (0 in one process)

  // Elastic membership (docs/elastic.md), multi-node collectives, on the world handle.
  // Collective over the world's members still alive after a loss (node_lost): returns the world
  // of the survivors, ranked in their old order, usable at once; this handle's ops then fail with
  // Errc::revoked. `exclude`: ranks still alive to leave out too (with their node: a node's peers
  // go together). A member lost during the shrink is left out of it. Every caller passes the same
  // list; a member excluded gets Errc::revoked if it calls. Called again, it returns the same world.
  // On a group's handle: collective over the group's members still alive, it returns the group of
  // them in the world's next epoch (made by the world's shrink or grow at this peer, or else by a
  // shrink of the world here, which every survivor of the world must join), in their old order;
  // `exclude` then names ranks of the group.
  Result<Peer> shrink(std::vector<uint32_t> exclude = {});
  // Collective over the world's members: returns the world grown by the nodes that registered
  // since it started and wait (a job with Config::elastic; none: the same members, in a new
  // epoch). Members keep their ranks; newcomers come after, and their register_peer returns
  // their Peer in the grown world.
  Result<Peer> grow();
  // Ends every op in flight of the world and its groups, at every member, with Errc::revoked
  // (the orchestrator tells the others at once); later ops fail alike. The world is then fit only
  // for shrink() or grow(). From any member; a revoke after the first changes nothing.
  Status revoke();
  uint32_t epoch() const;  // the membership epoch: 0 as admitted, one more per shrink or grow
  // Newcomers waiting for a grow (an elastic job's), as the orchestrator last told this node; it
  // tells every member when one registers or goes. Each member may see the change at its own
  // moment: agree on when to grow (for example, all-reduce it with max) before calling grow().
  uint32_t newcomers() const;

  // Object collectives: payloads of different lengths per peer.
  // Every peer gets every peer's bytes, in rank order.
  Result<std::vector<std::string>> all_gather_object(const std::string& mine);
  // Exactly one peer passes the bytes (0 bytes allowed); every peer gets them.
  Result<std::string> broadcast_object(std::optional<std::string> data);
  // Every peer gets every peer's tensor (same dtype, any shape of up to 8 dimensions).
  Result<std::vector<Tensor>> all_gather_v(const Tensor& in);
  // The root gets every peer's tensor; the others get an empty list.
  Result<std::vector<Tensor>> gather_v(const Tensor& in, PeerId root);

  // Many tensors all-reduced in place, in as few ops as the list allows (torch's
  // all_reduce_coalesced, a fusion buffer): small host tensors are packed into shared buffers, one
  // op each; large or GPU tensors are ops of their own (docs/api.md). Every peer passes the same
  // list: one dtype, the same shapes in the same order, each a host or a GPU tensor on every peer
  // alike (each peer's GPU may be its own), which one small exchange checks first, so a list that
  // differs fails every peer with the same words (a list of two dtypes: its own peer hears which
  // tensors). On a failure, some of the tensors may hold their results and others not.
  Status all_reduce_coalesced(std::vector<Tensor>& tensors, ReduceOp op);
  Work all_reduce_coalesced_async(std::vector<Tensor> tensors, ReduceOp op, OpOptions opts = {});

 private:
  friend struct PeerAccess;  // the library's own code (runtime/peer/peer_state.hpp)
  // The bodies of the calls above that run on the handle's lane (runtime/peer/groups.cpp, finish.cpp).
  Result<Peer> new_group_now(std::vector<PeerId> members);
  Result<Peer> split_now(int color, int key);
  Result<Peer> intra_node_now();
  Result<Peer> inter_node_now();
  Status destroy_now();
  Status finish_now();
  explicit Peer(std::shared_ptr<PeerState> s) : state_(std::move(s)) {}
  std::shared_ptr<PeerState> state_;
};

} // namespace chorus
