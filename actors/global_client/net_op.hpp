// One collective op as the global client sees it: the announcements of every node, the transfers
// that arrive from other nodes (possibly before this node's peers have called the op), and the
// sends this node has queued.
// Every node must see every node's announcement before it concludes the op. Announcements ride
// along with data: each data frame to a node is preceded by every announcement we know and have
// not yet sent it (ours and those others sent us), so where the schedule's messages lead from
// every node to every other (an all-reduce, an all-gather) no announcement travels alone. Ours
// goes alone only to the nodes no chain of messages reaches from us, and to everyone when the op
// stops early or takes long (everything we know then goes to every node, so nobody waits for a
// forward that will not come, e.g. behind a node that never calls).
// Peer threads reach it through RemoteSteps; the poller's pumping feeds it. net_op.cpp holds the
// transfers and the verdict, net_op_announcing.cpp the announcements and the events that stop it.
#pragma once
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "actors/global_client/announcements.hpp"
#include "strategies/executor.hpp"
#include "transport/connection.hpp"

namespace chorus {

class GlobalClient;

class NetOp : public RemoteSteps {
 public:
  // lost, left: what the node already knows (as node_lost() and node_left() would tell it).
  NetOp(std::shared_ptr<GlobalClient> client, uint32_t group, uint64_t seq, uint32_t num_nodes,
        const std::optional<Status>& lost, const std::vector<std::pair<uint32_t, Status>>& left);

  // This node's peers have all called the op. rank_node[r]: the node of the op's rank r (every
  // node that hosts a rank takes part; the others never hear of the op).
  // `announce` (a whole frame) still has to reach the nodes in `tell`: it rides along with this
  // node's first data frame to each, or goes alone before anyone waits.
  void launch(OpAnnouncement mine, Clock::time_point deadline, std::string label, uint32_t local_peers,
              std::vector<uint32_t> rank_node, FrameHeader announce_header, std::string announce_body,
              std::vector<uint32_t> tell);

  // From the connections (whoever pumps them).
  std::byte* incoming_frame(uint32_t node, const FrameHeader& h);
  void incoming_progress(uint32_t slot, std::size_t got);
  void incoming_failed(uint32_t slot);  // nothing will write to the slot again
  // `frame`: the announcement's body as it came (header h), to forward.
  void announced(const OpAnnouncement& a, const FrameHeader& h, const std::string& frame);
  void node_lost(const Status& why);
  // `node`'s note, half its timeout gone: these ranks of the op (group ranks) have not called it
  // there. A node that never announces is then named by those ranks.
  void stragglers(uint32_t node, std::vector<uint32_t> ranks);
  // Sends our announcement to every node still owed it (before anyone waits, or at once when this
  // node's peers failed).
  void flush();
  // Another node's peers gave up on the op (their timeout ran out; frame gave_up): where it would
  // succeed here (its peers called late, and found all they need), it fails with their error,
  // unless a peer of this node already ended it (its verdict stands). `never_launched`: that node
  // (`node`) timed out before its own peers all called, so it will take no part: the op stops
  // (nothing is waited for from it, nor any data, nor other nodes' announcements) and fails with
  // its error (in the words of a deadline here: the ranks that never called).
  void gave_up(const Status& why, uint32_t node, bool never_launched);
  // Whether this node's peers launched it (begin_op).
  bool launched() const {
    std::lock_guard<std::mutex> lk(mu_);
    return launched_;
  }
  std::optional<Status> given_up() const {
    std::lock_guard<std::mutex> lk(mu_);
    return given_up_;
  }
  // The node said goodbye: what it sent before is here; waits for anything more from it fail.
  void node_left(uint32_t node, const Status& why);
  // What this op waits for from other nodes, as the status report and the half-timeout warning
  // word it: "node 1 (not called yet)", "data from nodes 0, 2", "node 2 to take our data" (a send
  // whose bytes have not all left), or "" (not launched, or stopped).
  std::string waiting_for() const;
  // Every node's announcement, by node (one that has not come yet is empty). Once the op has
  // concluded without error, every node's is here and they agree.
  std::vector<std::optional<OpAnnouncement>> announcements() const;

  // RemoteSteps.
  bool is_remote(int peer) const override;
  void post_send(uint32_t slot, int peer, const std::byte* data, std::size_t bytes) override;
  Status wait_sent(uint32_t slot) override;
  const std::byte* wait_received(uint32_t slot, int peer, std::size_t bytes, std::size_t upto,
                                 Status& error) override;
  void done_with(uint32_t slot) override;
  bool offer_destination(uint32_t slot, int p, std::byte* dst, std::size_t bytes) override;
  void abort(const Status& why) override { stop(why); }
  Status conclude(int p, Status local) override;

 private:
  struct Incoming {
    WaitWord word;                        // bumped on every piece; raised to the top on abort
    std::shared_ptr<std::byte> buf;  // from the client's pool, unless the bytes land in `offered`
    std::byte* data = nullptr;       // where the payload is
    std::byte* offered = nullptr;    // the consumer's own memory (offer_destination)
    std::size_t offered_bytes = 0;
    int owner = -1;                  // the local rank that offered
    std::size_t bytes = 0;
    uint32_t node = 0;
    std::atomic<std::size_t> got{0};
    std::atomic<bool> started{false};
    std::atomic<bool> failed{false};
    std::atomic<int64_t> awaited_from{-1};  // the node a local peer waits for it from (waiting_for)
  };
  // Before returning to the caller: no pump may still be writing into the caller's memory.
  void release_offered(int p);
  struct Outgoing {
    std::shared_ptr<SendTicket> ticket;
    uint32_t node;
  };
  // Frames queued on connections under mu_, which fixes their order there (an announcement before
  // the data that relies on it); pushed once mu_ is released, so that nothing is written or
  // encrypted under it. The pushing thread writes what the socket takes at once, never blocking,
  // and leaves the rest to the connection's writer (Connection::push); begin_op and abort, like
  // every other caller, run without the local server's lock.
  struct Outbox {
    std::vector<Connection*> conns;
    void queue(Connection* c, std::shared_ptr<SendTicket> t);
    void send() const;
  };
  std::shared_ptr<Incoming> incoming(uint32_t slot);
  std::shared_ptr<Incoming>& incoming_locked(uint32_t slot);  // get or make; mu_ held
  // Stops the op (as abort does) when `theirs` says its node will not run it, or disagrees with
  // ours; needs our own announcement (so also called from launch for those that came first).
  void stop_if_doomed_locked(const OpAnnouncement& theirs, Outbox& out);
  void wake_if_stopped_locked();  // wakes every receive wait once the op is stopped
  // Wakes the waits for data in `recs` and for announcements, to look again (taken without mu_).
  void wake_waits(const std::vector<std::shared_ptr<Incoming>>& recs);
  // Stops the op and tells every node everything we know (a node that waits for our forwards
  // would wait in vain otherwise; sends on connections that are gone just fail).
  void stop(const Status& why);
  // Nodes that have not announced, as the errors and the status name them: their ranks that never
  // called where the node said which ("rank 3"), else the node ("node 1"); "rank 3 and node 2".
  std::string silent_names_locked(const std::vector<uint32_t>& silent) const;
  // The announcements `node` has not had from us yet, as whole frames (never its own).
  std::string bundle_for_locked(uint32_t node);
  void spread_locked(Outbox& out);  // every known announcement to every node taking part
  // This node's peers timed out: the op's other nodes hear it (once), so that one whose peers call
  // it late fails it alike rather than completing it with the data we sent before.
  void tell_given_up(const Status& why);
  // Waits (leading the poller) until w reaches target or the deadline; spreads what we know once
  // the op has taken longer than kSpreadAfter. `spin`: as Poller::wait's.
  bool await(WaitWord& w, uint32_t target, bool spin = true);
  static constexpr std::chrono::milliseconds kSpreadAfter{20};

  std::shared_ptr<GlobalClient> client_;
  uint32_t group_;
  uint64_t seq_;
  uint32_t my_node_;
  // Everything below. Taken after the poller's lead (frames are routed to the op while leading)
  // and before a connection's own mutex (frames are queued under it; see Outbox); never together
  // with GlobalClient::mu_ or P2PMailbox's. Nothing is written, encrypted or allocated large
  // under it. (The whole order: global_client.hpp.)
  mutable std::mutex mu_;
  std::vector<std::optional<OpAnnouncement>> ann_;  // by node
  WaitWord ann_word_;                               // announcements so far; the top on node loss
  bool launched_ = false;
  // The op's bound, read without mu_ by the waits. Until every node taking part announced, the
  // meeting's: the shortest of this node's peers' timeouts (else the Config's). Then, where any
  // node's peers gave the op a timeout of its own (OpAnnouncement::timeout_ms), the shortest of
  // those, counted from then: the same on every node, and never later than data_deadline_ (the
  // later of this node's own bound and its Config's, from the launch). It may come closer (the waits are
  // woken to look again). Where none gave one, data_deadline_, as ever.
  std::atomic<Clock::time_point> deadline_{Clock::time_point{}};
  Clock::time_point data_deadline_{};
  bool all_called_ = false;
  // Sets the bound for the transfers once every node announced; true where it came closer.
  bool extend_if_all_called_locked();
  // Wakes every wait of the op, so that each looks again at the bound and what it waits for.
  void wake_all_waits();
  // How long a send of ours (begun or queued), or a transfer into the caller's memory that has
  // begun, may still take: never less than data_deadline_. A short bound ends the op, not a link
  // in the middle of a frame or to a receiver only slow: the frame is finished (the other node
  // reads on), or the link cut as stalled.
  std::atomic<Clock::time_point> link_floor_{Clock::time_point{}};
  Clock::time_point link_deadline() const { return std::max(deadline_.load(), link_floor_.load()); }
  Clock::time_point spread_at_{};
  std::atomic<bool> spread_{false};  // await() spread once
  std::atomic<Clock::time_point> half_at_{};  // half the op's time gone: await() says what it waits for, once
  std::atomic<bool> warned_{false};
  std::string label_;
  uint32_t local_peers_ = 0, concluded_ = 0;
  std::map<uint32_t, std::shared_ptr<Incoming>> in_;
  std::map<uint32_t, Outgoing> out_;
  std::optional<Status> abort_;
  std::optional<Status> lost_;
  std::optional<Status> given_up_;  // another node's timeout (gave_up)
  bool told_given_up_ = false;      // ours went to the other nodes
  bool concluded_ok_ = false;       // a peer of this node ended it well: no note goes
  std::vector<bool> gone_;  // by node: left in order (see node_left)
  // The error of the first node that timed out before its part began (gave_up): nothing will come
  // from it, and no announcement can change the verdict.
  std::optional<Status> absent_status_;
  std::optional<Status> left_status_;  // why, once a node has left
  std::vector<uint32_t> rank_node_;  // by op rank (set at launch)
  std::vector<bool> takes_part_;     // by node
  std::vector<std::string> ann_frame_;  // by node: its announcement as a whole frame, once known
  std::vector<bool> sent_;  // [to node * nodes + origin]: that announcement went to that node
  std::vector<bool> to_tell_;        // by node: ours must go there directly and has not yet
  std::vector<std::vector<uint32_t>> stragglers_;  // by node: its note (stragglers())
};

} // namespace chorus
