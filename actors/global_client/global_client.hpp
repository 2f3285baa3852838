// The global client: one per node process in multi-node mode. It registers the node with the
// orchestrator (orchestrator_join.hpp), opens one data connection to every other node
// (mesh/data_mesh.hpp), and runs the inter-node part of every op: it announces what this node's peers
// called, carries the schedule's transfers whose other side is on another node (net_op.hpp), and
// turns a lost node, a frozen node or a disagreement into the same error on every peer.
//
// Peers keep one global numbering: node k's peers are ranks offset(k) .. offset(k)+peers(k)-1, so a
// collective over all peers runs one schedule (strategies/) in which transfers between peers of one
// node go through memory (strategies/executor.hpp) and the others through the data connections.
//
// Its parts: global_client.cpp (starting, closing, node loss, the topology), op_table.cpp (the ops
// in flight), frame_routing.cpp (where arriving frames go), p2p_send_recv.cpp (send and recv across nodes).
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <chorus/config.hpp>
#include <chorus/result.hpp>
#include "actors/global_client/announcements.hpp"
#include "actors/global_client/orchestrator_join.hpp"
#include "actors/global_client/p2p.hpp"
#include "core/buffer_pool.hpp"
#include "core/pause_watch.hpp"
#include "strategies/arena.hpp"
#include "strategies/executor.hpp"
#include "strategies/tuning.hpp"
#include "transport/connection.hpp"
#include "transport/poller.hpp"
#include "transport/shm/segment.hpp"

namespace chorus {

namespace gpu {
class NcclJob;
}
class NetOp;

class GlobalClient : public FrameSink, public std::enable_shared_from_this<GlobalClient> {
 public:
  // Registers with the orchestrator named by config.orchestrator_address, listens for data on
  // config.node_address ("host" or "host:port"; port 0 or none picks a free one), and connects to
  // every other node. Everything within config.timeout. Its control side (the node actor) runs in
  // `sys`, the runtime's actor system, which must be configured for remoting and outlive it.
  // `rejoin`: this node is a member of a running collective joining its next epoch (shrink, grow),
  // whose client before is `before`. The join registers over its orchestrator link (no new door
  // passage), listens on the data port it had when it can (binding a given port skips the search
  // for a free one: with many sockets in TIME_WAIT that search took milliseconds), and keeps its
  // links to the members that stay (hand_over_links): only new pairs (newcomers) connect.
  static Result<std::shared_ptr<GlobalClient>> start(const Config& config, caf::actor_system& sys,
                                                     const RejoinData& rejoin = {},
                                                     GlobalClient* before = nullptr);
  ~GlobalClient() override;
  // Says goodbye to every node and leaves the orchestrator. Idempotent. A link kept by a later
  // epoch (its stamp changed: Connection::rehome) is that epoch's: left alone.
  void close();
  // For the next epoch, once it has formed: every op fails with `why`, nothing reads the
  // connections any more, and they are returned by node id (null: none). The next epoch rehomes
  // those of its members (Connection::rehome; an ended one is not kept).
  std::vector<std::shared_ptr<Connection>> hand_over_links(const Status& why);
  // The node ids whose link ended on this side (or was never made): what this node's rejoin names
  // as links it cannot keep (RejoinData::unkept).
  std::vector<uint32_t> unkept_links() const;

  const TopologyData& topology() const { return topo_; }
  const Config& config() const { return config_; }  // as it joined (the orchestrator's address found)
  // This node's data address as the other nodes reach it ("host:port").
  const std::string& data_address() const { return topo_.nodes[topo_.node_id].data_address; }
  // An elastic job's newcomers waiting for a grow (NodeSession::newcomers); 0 once closed.
  uint32_t newcomers() const;  // 0 before the join
  // The orchestrator's loss as the node actor heard it ("orchestrator lost: ..."), if it was.
  std::optional<std::string> orchestrator_lost() const;
  bool wait_newcomers(uint32_t n, Clock::time_point deadline) const;
  uint32_t node_id() const { return topo_.node_id; }
  uint32_t offset() const { return topo_.nodes[topo_.node_id].peer_offset; }
  uint32_t total_peers() const { return topo_.total_peers; }
  uint32_t node_of(uint32_t rank) const;
  // Not ok once a node was lost: every later op fails with it.
  Status lost() const;
  // When this process stood still long enough to be dropped (kStoodStill, ended at most
  // kStoodStillWithin ago, or still going on as far as its watch knows), what to say instead of
  // blaming the nodes that cut it off meanwhile: "this node stood still for 5.3 s (...)".
  std::optional<std::string> stood_still() const;
  static constexpr std::chrono::seconds kStoodStill{1}, kStoodStillWithin{5};
  // `listener` hears the first node loss ("node K lost: ...", as lost() then says) once, after the
  // client's locks are released: at once when a node is lost already, else when one is. The local
  // server's core registers it, so that its waits for this node's own peers end too. One listener:
  // a later call replaces it.
  using LossListener = std::function<void(const Status& why)>;
  void on_first_loss(LossListener listener);
  // `listener` hears that another node never launched collective (group, seq) (its own peers timed
  // out before they all called: a gave_up note), after the client's locks are released; it says
  // whether this node will never launch the op either (its peers' wait for each other ended with
  // that error), and the op then leaves the table as tell_never_called's does. The local server's
  // core registers it. One listener: a later call replaces it.
  using NeverLaunchedListener = std::function<bool(uint32_t group, uint64_t seq, const Status& why)>;
  void on_never_launched(NeverLaunchedListener listener);

  // Half of collective (group, seq)'s timeout gone with `ranks` (group ranks) of this node not
  // called yet: tells every other node of the op (members: global ids by group rank; empty for
  // the world), so that they name those ranks rather than this node.
  void tell_stragglers(uint32_t group, uint64_t seq, const std::vector<uint32_t>& members,
                       const std::vector<uint32_t>& ranks);
  // Collective (group, seq) timed out among this node's peers (`why`), before they all called:
  // its other nodes (members as for tell_stragglers) stop waiting for this one, and fail with `why`.
  // This node will never launch it: the op leaves the table (where other nodes' frames put it),
  // and its later frames are dropped.
  void tell_never_called(uint32_t group, uint64_t seq, const std::vector<uint32_t>& members, const Status& why);
  // Another node's timeout on collective (group, seq), once its note came (NetOp::gave_up) and
  // while the op is in this node's table.
  std::optional<Status> given_up(uint32_t group, uint64_t seq);
  // A note on collective (group, seq) (a frame of `type`, `body` its payload) to each of `nodes`
  // (never this one), once the mesh is up.
  void tell_nodes(FrameType type, uint32_t group, uint64_t seq, const std::string& body,
                  const std::vector<uint32_t>& nodes, uint32_t slot = 0);
  // Collective (group, seq) failed here with `why`: the first such is what this node tells the
  // others when it leaves (close()), so that those still waiting in that op report `why`, the
  // cause, rather than this node's departure.
  void note_failure(uint32_t group, uint64_t seq, const Status& why);
  // What collective (group, seq) waits for from other nodes (NetOp::waiting_for), or "".
  std::string op_waits_for(uint32_t group, uint64_t seq);
  // Whether collective (group, seq) is in the table of ops in flight (for tests: an op that ended
  // here must not stay).
  bool holds(uint32_t group, uint64_t seq) const;
  // A test's hook: called on the thread of an op that is about to wait for data from another node,
  // with the op's (group, seq), after its announcement has left. Tests freeze a node there, inside
  // the op (an event, not a moment guessed from outside it). Empty: none.
  using DataWaitHook = std::function<void(uint32_t group, uint64_t seq)>;
  void set_data_wait_hook(DataWaitHook hook);
  void before_data_wait(uint32_t group, uint64_t seq);
  // What the node actor answers the orchestrator's status requests with (NodeEvents).
  void set_status_source(std::function<Envelope()> source);

  // The node of each rank of an op over `members` (global peer ids by rank; empty: the world).
  std::vector<uint32_t> rank_nodes(const std::vector<uint32_t>& members) const;
  // The nodes an op over `members` takes part on, each once.
  std::vector<uint32_t> op_nodes(const std::vector<uint32_t>& members) const;
  // What the choice of a GPU op's path reads (the planner's path table, strategies/plan_rules.hpp): the node
  // of each rank of `members` and every node's registered GPUs.
  Topology gpu_topology(const std::vector<uint32_t>& members) const;

  // Called (without the local server's lock) when every local member has called op (group, seq):
  // sends `mine` to the nodes hosting a member that `reached` (by node) does not mark, rides it
  // along with the data to the others, and returns the remote half of the op's plan. rank_node:
  // rank_nodes() of the op's members.
  std::shared_ptr<RemoteSteps> begin_op(uint32_t group, uint64_t seq, OpAnnouncement mine,
                                        Clock::time_point deadline, std::string label,
                                        std::vector<uint32_t> rank_node, uint32_t local_members,
                                        const std::vector<bool>& reached);

  // Point to point with a peer of another node: blocks until the receiver took the data (send)
  // or the data arrived (recv); both sides get the same error when the pair does not match.
  // `failed`: this side cannot send (e.g. its GPU tensor could not be staged): the receiver is told
  // why instead of getting data, and both return that error.
  // `k` names the pair: the handle's group (the frames carry it), both global ids, the tag.
  // A send that times out withdraws its message (frame p2p_cancel), so no later receive takes
  // it; where a receive took it meanwhile, the send succeeded after all.
  Status send(const P2PMailbox::Key& k, const Tensor& t, Clock::time_point deadline,
              const Status& failed = Status::ok());
  // `ticket`: the receive's place in the mailbox, where it was posted at its call (P2PMailbox::Posted).
  Status recv(const P2PMailbox::Key& k, Tensor& t, Clock::time_point deadline, uint64_t ticket = 0);
  // What recv does with the message it took: checks it against `t`, copies its data in (or pulls
  // the data straight into `t` where only its header came, by `deadline`), and answers the sender. A receive from any
  // source takes its message from the mailbox itself (p2p()).
  Status take_delivered(const P2PMailbox::Key& k, const P2PMailbox::Message& m, Tensor& t, Clock::time_point deadline);
  // Tells the sender of message `id` that it was withdrawn before a receive took it (the answer
  // its timed-out send waits for).
  void answer_withdrawn(const P2PMailbox::Key& k, uint64_t id);
  // Tells the receive that pulled message `id` of k that its send gave up (a p2p_pulled frame
  // without data, saying why: `cause`, cut to what a header holds).
  void refuse_pull(const P2PMailbox::Key& k, uint64_t id, const Status& cause);
  // The cause of a send of k that gave up because its own timeout ran out.
  Status gave_up_in_time(const P2PMailbox::Key& k) const;
  P2PMailbox& p2p() { return *p2p_; }

  // This node's NCCL communicators across nodes (cuda/nccl_job.hpp), made on first use; nullptr
  // and `error` where there is no NCCL (chorus built without CUDA, and no test double in place).
  // A node loss aborts every one of them.
  gpu::NcclJob* nccl(Status& error);
  // The job's arena, where every node lies on one host (mesh/data_mesh.hpp); null otherwise. Closed
  // at the first loss and when this node closes, so no peer waits in it for a node gone.
  std::shared_ptr<ArenaSeat> arena() const {
    std::lock_guard<std::mutex> lk(mu_);
    return arena_;
  }

  // FrameSink (whoever leads the poller).
  std::byte* begin_frame(uint32_t node, const FrameHeader& h) override;
  void progress(uint32_t node, const FrameHeader& h, std::size_t got) override;
  void frame_failed(uint32_t node, const FrameHeader& h) override;
  void closed(uint32_t node, bool orderly, const std::string& why) override;
  void broken(uint32_t node, const std::string& why) override;

  // Used by NetOp.
  Connection* connection(uint32_t node) { return conns_[node].get(); }
  // Whether `c` still serves this epoch (a later one may have kept it: rehome).
  bool ours(const Connection& c) const { return c.magic() == own_magic(); }
  uint32_t own_magic() const { return FrameHeader::magic_of(topo_.epoch); }
  // A frame of this epoch (FrameHeader::magic_of): a connection kept into a later epoch drops it.
  FrameHeader frame_header(FrameType type) const {
    FrameHeader h;
    h.magic = own_magic();
    h.type = type;
    return h;
  }
  BufferPool& pool() { return pool_; }
  // Every wait for something from another node goes through it (it reads the connections).
  Poller& poller() { return poller_; }
  void finished(uint32_t group, uint64_t seq);
  // A node was lost (`heard` names it), or told (node NodeEvents::kLinkNotice): every op fails
  // (with `heard`, unless this node stood still: stood_still()). `announced`: the orchestrator
  // said so (a frozen node's connection is then shut here, so that sends to it end).
  void on_node_lost(uint32_t node, const std::string& heard, bool announced = false);
  // Peer::revoke: tells the orchestrator (which tells every other member), and every op of this
  // node fails with Errc::revoked; the collective is then fit only for shrink or grow.
  void revoke();
  // The node left this collective for its next epoch (runtime/peer/elastic.cpp): every op still in it fails
  // with `why` (not with a shutdown), then the client closes.
  void retire(const Status& why);
  // This node's connection to `node` broke (`saw`: how): every op fails with the link named
  // (link_lost_message), and the orchestrator is told, so that every other node hears of it.
  void on_link_broken(uint32_t node, const std::string& saw);
  // The orchestrator's notice that another node's connection broke: every op fails with it, and an
  // end of that link stops using it (cut), so that nothing queued on it waits any longer.
  void on_link_notice(const LinkLostData& l);
  // Treats the link to `node` as broken (on_link_broken) and resets it, so reads and writes let go
  // of callers' memory.
  void cut_off(uint32_t node, const std::string& why);
  // The detector of a stalled link, on the op timeout (nothing watches the data path): an op half
  // through its time notes which connections have bytes waiting for an acknowledgment; when an op
  // runs out of time, a connection that had bytes waiting at such a note, a quarter of the timeout
  // ago or more, and has had no acknowledgment since, has stalled (a healthy path acknowledges
  // within a round trip, a frozen process's kernel too): it is cut off as a broken link, so that
  // the job hears which link it was rather than only what timed out.
  void note_unacked_links();
  void check_stalled_links();
  // Waits until the ticket's bytes are in the socket; past the deadline the node counts as frozen
  // and is cut off (a link a later epoch kept is cut only where the ticket had begun on it:
  // Connection::abandon). True when every byte was written.
  bool await_sent(SendTicket& t, uint32_t node, Clock::time_point deadline);
  // The data of message `id` of k, whose header came alone: asked of the sender's node (p2p_pull),
  // it lands in `t` as it arrives.
  Status pull(const P2PMailbox::Key& k, uint64_t id, Tensor& t, Clock::time_point deadline);
  // A receive (`ticket`) that took no message: whether one landed in its tensor after all (m), once
  // data still being written there stopped.
  bool settle_landing(uint32_t node, uint64_t ticket, P2PMailbox::Message& m);

 private:
  // Whether peer `src` is on node `src_node` and `dst` on `dst_node`: a send's frame names the pair,
  // and a node may speak only for its own peers.
  bool pair_between(uint32_t src, uint32_t src_node, uint32_t dst, uint32_t dst_node) const;
  GlobalClient() = default;
  std::shared_ptr<NetOp> op_for(uint32_t group, uint64_t seq, bool create);
  // The orchestrator as this client's session reached it (null: never, or known lost): the next
  // epoch's join registers over it while this client, not yet retired, still watches the link.
  orchestrator_actor orchestrator_link() const { return notices_ ? notices_->orchestrator() : orchestrator_actor{}; }
  // The host's arena (mesh/host_arena.hpp), offered by node 0 and answered in frames on the links
  // once the poller reads them; arena_frame() takes those frames (frame_routing.cpp).
  Status share_arena(Clock::time_point deadline);
  void arena_frame(uint32_t node, const FrameHeader& h, const std::string& bytes);

  // Every op fails with `why` (the first such is what every later op reports), every wait for
  // another node ends; `announced`: the orchestrator said `node` is lost (its connection is shut).
  void end_every_op(uint32_t node, const Status& why, bool announced);
  // The session as joined, kept for reading its notices when close() has let go of it (fixed
  // once start() returns).
  std::shared_ptr<const NodeSession> notices_;
  Config config_;
  OrchestratorLink orchestrator_;
  std::function<void(const LinkLostData&)> report_link_;  // to the orchestrator; set before any data flows
  TopologyData topo_;
  std::vector<std::shared_ptr<Connection>> conns_;  // by node id; null for this node; shared with
                                                    // the epochs that keep them
  std::shared_ptr<PauseWatch> pause_;               // the process's (stood_still)
  PauseWatch::Clock::time_point watched_from_;      // the join: pauses ended before it are not ours
  // conns_ is complete (a loss may be told during the join, from the orchestrator's thread).
  std::atomic<bool> meshed_{false};
  std::shared_ptr<ArenaSeat> arena_;                // set once (under mu_), before any op
  WaitWord arena_word_;                             // share_arena: offers or answers come (top: lost)
  Poller poller_;                                   // reads conns_; stopped before they go
  // Per node: the frame being read from it (only whoever pumps its connection touches it).
  struct Reading {
    std::shared_ptr<NetOp> op;  // a data frame's op, and its slot
    uint32_t slot = 0;
    std::string bytes;          // a control frame's payload (a point-to-point header too)
    bool refused = false;       // the node broke the rules of point to point: its frames are dropped
    // An eager message whose data must be the next frame (p2p_body): delivered once that is in.
    std::optional<std::pair<P2PMailbox::Key, P2PMailbox::Message>> parked;
  };
  std::vector<Reading> reading_;
  // `node` broke the rules of point to point (`why`, after "node N "): lost, and every later frame
  // of it dropped unread. The reader's (its Reading is the reading thread's alone).
  void refuse(uint32_t node, const std::string& why);
  // By node: since when (steady clock, ns; 0: none) bytes to it have waited for acknowledgment,
  // as the notes of note_unacked_links() found.
  std::unique_ptr<std::atomic<int64_t>[]> unacked_since_;

  // Locks of the data plane. The one chain, outermost first (a thread holding one takes only
  // those below it):
  //   Poller::lead_mu_      the leader's token: whoever holds it pumps the connections, so every
  //                         FrameSink callback runs under it (and may take any lock below, and
  //                         send small frames, never blocking: a write that would block is left
  //                         to the writer thread)
  //   NetOp::mu_            one op's state; frames are queued under it (their order is fixed
  //                         there) and pushed after it is released
  //   TcpConnection::mu_    a connection's queue and flags; nothing is written under it
  // Leaves (nothing else is taken under them): GlobalClient::mu_ (the ops in flight, the node's
  // losses, below: NetOps are made under it but never called, and nothing is sent),
  // P2PMailbox::mu_, Poller::sleepers_mu_, TlsChannel::mu_ (held to encrypt or decrypt, its job),
  // the BufferPool's. So GlobalClient::mu_, NetOp::mu_ and P2PMailbox::mu_ are never held
  // together: whoever must tell the ops something collects them under mu_ and calls them after
  // releasing it.
  std::atomic<bool> has_data_wait_hook_{false};  // checked first: no lock on an op's path without a hook
  std::mutex hook_mu_;
  DataWaitHook data_wait_hook_;
  mutable std::mutex mu_;
  std::map<std::pair<uint32_t, uint64_t>, std::shared_ptr<NetOp>> ops_;
  std::set<std::pair<uint32_t, uint64_t>> done_;  // finished ops: late frames are dropped
  std::vector<std::pair<uint32_t, uint64_t>> done_order_;
  std::optional<Status> lost_;                     // a node died or froze: every op fails
  LossListener loss_listener_;                     // told of lost_ once, outside mu_
  NeverLaunchedListener never_listener_;           // told of other nodes' never-launched notes, outside mu_
  std::vector<std::pair<uint32_t, Status>> left_;  // nodes that said goodbye
  struct Failure {
    uint32_t group = 0;
    uint64_t seq = 0;
    Status why;
  };
  std::optional<Failure> first_failure_;           // note_failure(): told when leaving
  std::vector<std::optional<Failure>> leaving_;    // by node: what it told before its goodbye
  bool closed_ = false;
  std::optional<SharedSegment::Offer> arena_offer_;  // node 0's, as it came
  std::vector<uint8_t> arena_answers_;               // node 0: by node, 1 mapped, 2 declined
  uint32_t arena_answered_ = 0;
  std::unique_ptr<P2PMailbox> p2p_;
  std::atomic<uint64_t> p2p_ids_{0};  // this node's sends, numbered: an answer names its message
  BufferPool pool_;
  std::mutex nccl_mu_;  // a leaf: guards the making of nccl_ (never replaced once made)
  std::shared_ptr<gpu::NcclJob> nccl_;
};

} // namespace chorus
