// The orchestrator: admits the nodes of one collective at a time, checks that they agree (protocol
// version, configuration; the shared secret is the front door's to check, published.hpp, and never
// crosses the wire), assigns node ids (the rank a launcher gave a node, else arrival order) and
// hands every node the topology once all expected nodes are in. A refused node of a job ends its
// partners' admission at once, naming it (see orchestrator_core.cpp for which refusals do not).
// It watches nodes (monitors) and never touches tensor data.
//
// This file: OrchestratorCore, the rules, free of CAF (message-level tests drive it directly).
// actors/orchestrator/orchestrator.hpp is the actor shell that feeds it CAF messages, monitors
// nodes and runs its timers.
//
// Protocol (messages/chorus.capnp, every payload a chorus::Envelope):
//   node -> orch  request (register_atom, NodeRegister)  => NodeRegisterReply (delayed until the
//                 collective is complete; an error reply at once on rejection)
//   node -> orch  (node_leave_atom, NodeLeave)           one-way: the node leaves the collective
//   orch -> node  (node_lost_atom, NodeLost)             a node of the complete collective was lost
//   node -> orch  (link_lost_atom, LinkLost)             its data connection to another member broke
//   orch -> node  (link_lost_atom, LinkLost)             the collective's first broken connection
//   anyone -> orch request (get_atom) => (uint64 collective, uint64 registered, bool complete)
//   node -> orch  (revoke_atom, collective, node id, ticket)  Peer::revoke: the member, proved
//   orch -> node  (revoke_atom, collective, by node)          to every other member still in
//
// Membership epochs (orchestrator_epochs.cpp; docs/elastic.md): a member of the complete
// collective registers again, with NodeRegister.rejoin naming the member it was and proving it
// with its ticket, to shrink (leave out the lost and the excluded) or grow (take in the newcomers
// of an elastic job, who registered after it started and wait). Once every member still alive and
// not excluded has done so, the next epoch forms: a new collective number and token, the members
// in their old order (newcomers after), and each gets its topology as the answer. A member lost
// meanwhile is left out; the round gives up after the admission timeout, naming who did not come.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <optional>
#include <string>
#include <vector>

#include <chorus/config.hpp>
#include <chorus/status.hpp>
#include "messages/link_codec.hpp"
#include "messages/node_codec.hpp"
#include "messages/status_codec.hpp"

namespace chorus {

class OrchestratorCore {
 public:
  struct Options {
    uint32_t expected_nodes = 1;
    std::chrono::milliseconds timeout{30000};           // admission of one collective
    std::function<uint64_t()> token_source;             // the data-plane token per collective
  };
  // The host's handle of a node (the shell maps actor addresses to keys). Never reused.
  using NodeKey = uint64_t;

  struct Reply {
    NodeKey to;
    Status status;           // ok: `topology` is the node's
    TopologyData topology;
  };
  struct Notice {
    NodeKey to;
    NodeLostData lost;
  };
  struct LinkNotice {
    NodeKey to;
    LinkLostData link;
  };
  struct RevokeNotice {
    NodeKey to;
    uint64_t collective;
    uint32_t by;  // the node that revoked it
  };
  struct NewcomerNotice {  // an elastic job's newcomers waiting for a grow: `waiting` of them
    NodeKey to;
    uint64_t collective;
    uint32_t waiting;
  };
  // What the host must do after an event.
  struct Effects {
    std::vector<Reply> replies;
    std::vector<Notice> notices;
    std::vector<LinkNotice> link_notices;
    std::vector<NewcomerNotice> newcomer_notices;
    std::vector<RevokeNotice> revoke_notices;
    std::string ignored;           // why a message changed nothing (for the log), or ""

    std::vector<NodeKey> watch;    // start monitoring these nodes
    std::vector<NodeKey> forget;   // these keys are no longer members (stop monitoring)
    std::optional<std::pair<uint64_t, std::chrono::milliseconds>> timer;  // call on_timeout(id) after
  };

  explicit OrchestratorCore(Options o);

  // A registration: a first one (admission, or a newcomer of a running elastic job) or a rejoin.
  Effects on_register(NodeKey who, const NodeRegisterData& r);
  // A register message that could not be decoded: answered "garbled registration" and nothing
  // more (the decoder's text, with Cap'n Proto's stack, is for the orchestrator's log only).
  Effects on_garbled(NodeKey who);
  Effects on_leave(NodeKey who);
  Effects on_down(NodeKey who, const std::string& reason);
  Effects on_timeout(uint64_t timer);
  // A member's report that its data connection to another member broke. The collective's first
  // goes to every other member still in it (the two ends knew first); a report from a non-member,
  // for another collective or naming another reporter is ignored, and so is every later one (the
  // first failure is what every op reports) and one whose other end is gone already (its loss
  // was told).
  Effects on_link_lost(NodeKey who, const LinkLostData& l);
  // A member revokes the running collective (Peer::revoke), naming itself with its ticket: every
  // other member still in is told, once (a later revoke, or one from anyone else, is ignored).
  Effects on_revoke(NodeKey who, uint64_t collective, uint32_t node, uint64_t ticket);

  // Introspection (tests, daemon logs).
  uint64_t collective() const { return collective_; }
  bool complete() const { return complete_; }
  std::size_t registered() const { return members_.size(); }
  bool is_member(NodeKey k) const { return index_of(k) >= 0; }
  // The members' keys, by node id once complete (by arrival before).
  std::vector<NodeKey> member_keys() const;
  const std::vector<NodeLostData>& lost() const { return lost_; }  // of the current collective
  const std::optional<LinkLostData>& link_lost() const { return link_lost_; }  // its first broken link
  // Once complete: every member by node id, joined, left or lost (with why); empty before.
  std::vector<JobMemberData> membership() const;
  const Options& options() const { return opts_; }
  uint32_t epoch() const { return epoch_; }  // of the running collective (0 at admission)
  // Shrink or grow under way: the members (node ids) that sent their rejoin; none: empty.
  std::vector<uint32_t> rejoined() const;
  std::size_t newcomers() const { return newcomers_.size(); }  // waiting for a grow

 private:
  struct Member {
    NodeKey key;
    uint32_t num_peers;
    std::string data_address;
    uint32_t hardware_threads;
    std::string host_key;
    uint32_t gpus;
    int32_t rank = -1;  // the node id its launcher gave it (-1: any)
    bool left = false;  // no longer a member: said goodbye, or lost (below)
    std::optional<std::string> lost{};  // why, when it did not say goodbye
    uint64_t ticket = 0;  // its alone (TopologyData::ticket): a rejoin presents it
  };
  // A shrink or grow under way: the rejoins so far, by the node id they had.
  struct Round {
    RejoinData::Kind kind = RejoinData::Kind::none;
    std::vector<uint32_t> exclude;
    std::map<uint32_t, Member> rejoined;
    uint64_t timer = 0;
    // Pairs of node ids (lower first) whose link ended on one side (RejoinData::unkept): the next
    // epoch remakes them on both sides, so that neither keeps a link the other cannot.
    std::set<std::pair<uint32_t, uint32_t>> unkept;
  };
  // The epoch before the running one: what a member that came too late is told.
  struct Past {
    uint64_t collective = 0;
    std::map<uint32_t, Status> dropped;  // node id -> why it is not in the next epoch
  };
  Effects on_rejoin(NodeKey who, const NodeRegisterData& r);
  Effects on_newcomer(NodeKey who, const NodeRegisterData& r);
  Status check_rejoin(NodeKey who, const NodeRegisterData& r) const;
  void maybe_finish_round(Effects& fx);
  // By new node id: the new ids of the members whose kept link to it ends (Round::unkept).
  static std::vector<std::vector<uint32_t>> links_to_remake(const Round& round, const std::vector<int32_t>& previous);
  void end_round(Effects& fx, const Status& why);
  // Topology replies to every member (by node id), `previous` their ids in the epoch before.
  // `relink`, by node id: the links each member remakes (links_to_remake; empty at admission).
  void send_topology(Effects& fx, const std::vector<int32_t>& previous,
                     const std::vector<std::vector<uint32_t>>& relink = {});
  bool excluded(uint32_t id) const;
  // The round's members (node ids) still to come: alive, not excluded, not rejoined yet.
  std::vector<uint32_t> awaited() const;
  int rejoiner_of(NodeKey who) const;  // the old node id whose rejoin `who` sent, or -1
  int newcomer_of(NodeKey who) const;
  void tell_newcomers(Effects& fx) const;  // to every member still in
  // `who` is a rejoin or a newcomer waiting for its topology: drops it (answering `why`, where
  // given and it is still waiting) and returns true.
  bool drop_waiting(Effects& fx, NodeKey who, const std::optional<Status>& why);
  Status check(NodeKey who, const NodeRegisterData& r) const;
  void finish_admission(Effects& fx);
  void maybe_next_collective(Effects& fx);
  void reset(Effects& fx);
  int index_of(NodeKey who) const;

  Options opts_;
  uint64_t collective_ = 1;
  bool complete_ = false;
  std::optional<Config> config_;       // the first node's, normalized
  std::vector<Member> members_;        // by node id once complete; arrival order before
  std::vector<NodeLostData> lost_;
  std::optional<LinkLostData> link_lost_;
  uint64_t next_timer_ = 1;
  uint64_t admission_timer_ = 0;       // the live admission timer (0: none)
  uint32_t epoch_ = 0;
  std::optional<Round> round_;
  std::vector<Member> newcomers_;      // an elastic job's, in arrival order, waiting for a grow
  std::optional<Past> past_;
  bool revoked_ = false;               // the running collective's (a new epoch is not)
};

// The config fields every node must agree on: per-node fields are blanked.
Config node_independent(const Config& c);

} // namespace chorus
