// Peer::shrink and Peer::grow (docs/elastic.md): the node joins the next membership epoch of its
// collective as a successor runtime (runtime_impl.hpp, `next`) whose join presents the member it
// was; the orchestrator forms the epoch once every member still alive has come
// (actors/orchestrator/orchestrator_epochs.cpp). The old world is then retired here. A group
// shrinks within its world's new epoch: the group of its members still there, in their old order.
#include <algorithm>
#include <optional>

#include <chorus/peer.hpp>

#include "actors/global_client/global_client.hpp"
#include "runtime/runtime_impl.hpp"
#include "core/log.hpp"

namespace chorus {

namespace {

// The world of `s`'s epoch (s: the world's handle, or one of its groups: they share the node's
// runtime, client and local peer) carried into the next epoch at this peer.
Result<Peer> next_epoch(const std::shared_ptr<PeerState>& s, RejoinData::Kind kind, std::vector<uint32_t> exclude) {
  const std::string what(to_string(kind));
  if (!s->global)
    return Status(Errc::invalid_argument, what + " is for multi-node collectives (num_nodes > 0): in one process no "
                                                "member can be lost or join");
  // The next epoch is the orchestrator's to form: without it (one hosted by a process that died)
  // there is none, and waiting for the join's timeout would only say so later.
  if (auto gone = s->global->orchestrator_lost())
    return Status(Errc::unreachable, what + " needs the orchestrator, and " + *gone +
                                         " (an orchestrator hosted by a rank dies with it: run chorus-run's or a daemon)");
  const auto start = Clock::now();
  RuntimeImpl& rt = *s->rt;
  const TopologyData& t = s->global->topology();
  // Ranks to nodes: a node's peers go together.
  std::vector<uint32_t> nodes;
  for (uint32_t r : exclude) {
    if (r >= t.total_peers)
      return Status(Errc::invalid_argument, what + ": rank " + std::to_string(r) + " is not one of the world's " +
                                                std::to_string(t.total_peers));
    if (s->global->node_of(r) == t.node_id)
      return Status(Errc::invalid_argument, what + ": it excludes rank " + std::to_string(r) + ", a peer of the caller's own node");
    nodes.push_back(s->global->node_of(r));
  }
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  auto sys = rt.system_for(nullptr);  // before global_mu: system_for takes a lock of its own
  if (!sys) return sys.status();
  std::shared_ptr<RuntimeImpl> next;
  {
    std::lock_guard<std::mutex> lk(rt.global_mu);
    if (rt.no_next) return Status(Errc::reset, what + ": the runtime is shutting down");
    if (rt.successors_gone)
      return Status(Errc::invalid_argument, what + ": this world's next epoch has been left for another already (epoch " +
                                                std::to_string(t.epoch) + " is two behind)");
    if (auto done = rt.successors.find(s->id); done != rt.successors.end()) {
      if (!rt.next || (rt.next->rejoin.kind == kind && rt.next->rejoin.exclude == nodes))
        return PeerAccess::make(done->second);
      return Status(Errc::op_mismatch, what + ": this peer left the world for its next epoch already, by a " +
                                           std::string(to_string(rt.next->rejoin.kind)) +
                                           (rt.next->rejoin.exclude == nodes ? "" : " excluding other nodes"));
    }
    if (!rt.next) {
      rt.next = std::make_shared<RuntimeImpl>(**sys);
      rt.next->rejoin = {kind, t.collective, t.node_id, t.ticket, nodes, {}};
      rt.next->flight = rt.flight;  // one recorder and one trace per process, whatever the epoch
      rt.next->trace = rt.trace;
      rt.next->prev = rt.shared_from_this();
    }
    next = rt.next;
  }
  const RejoinData& asked = next->rejoin;
  if (asked.kind != kind || asked.exclude != nodes)
    return Status(Errc::op_mismatch, what + ": another peer of this node asked for a " +
                                         std::string(to_string(asked.kind)) + " with other nodes excluded");
  // The config the node joined with, the orchestrator's address as found; the orchestrator numbers
  // the nodes of the next epoch in their old order.
  Config c = s->global->config();
  c.host_orchestrator = false;
  c.rendezvous_file.clear();
  c.rank = -1;
  // The join may last as long as the first could (the client's config holds what was left of
  // it then), and a little more: the orchestrator's own deadline for the round, the same limit
  // under chorus-run, then answers first, naming who did not come.
  c.join_timeout = s->config.join_limit() + RuntimeImpl::grace;
  auto p = next->register_peer(s->id, c);
  if (!p) {
    // A join that failed (a round that timed out, a refusal): that epoch cannot be had, and a
    // later call may try again with a successor of its own, while this node stays in the old
    // world. Any other failure (this peer registered there already) leaves the successor be.
    bool join_failed = false;
    {
      std::lock_guard<std::mutex> lk(next->global_mu);
      join_failed = next->join_outcome && !next->join_outcome->is_ok();
    }
    bool drop = false;
    if (join_failed) {
      std::lock_guard<std::mutex> lk(rt.global_mu);
      if (rt.next == next) {
        rt.next.reset();
        drop = true;
      }
    }
    if (drop) next->shutdown();
    return p;
  }
  {
    std::lock_guard<std::mutex> lk(rt.global_mu);
    if (!rt.successors_gone) rt.successors[s->id] = PeerAccess::state(*p);  // not once that epoch is left too
  }
  rt.retire(Status(Errc::revoked, "collective " + std::to_string(t.collective) + " was left for its next epoch by a " + what));
  CHORUS_LOG(info, init, (LogWhere{t.node_id}),
             what + " to " + std::to_string(p->size()) + " peers (epoch " + std::to_string(p->epoch()) + ") in " +
                 std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count()) + " ms");
  return p;
}

// `ids` (global ids of `from`'s epoch; nullopt: gone already) as the epoch after it numbers them:
// a peer keeps its place on its node, and its node is the one whose `previous` names it.
void carry(std::vector<std::optional<PeerId>>& ids, const GlobalClient& from, const TopologyData& to) {
  const TopologyData& was = from.topology();
  std::vector<int64_t> now(was.nodes.size(), -1);  // by old node id: its id in `to`
  for (size_t n = 0; n < to.previous.size(); ++n)
    if (to.previous[n] >= 0 && static_cast<size_t>(to.previous[n]) < now.size()) now[to.previous[n]] = static_cast<int64_t>(n);
  for (auto& id : ids) {
    if (!id) continue;
    const uint32_t node = from.node_of(*id);
    if (now[node] < 0) {
      id.reset();
      continue;
    }
    id = to.nodes[now[node]].peer_offset + (*id - was.nodes[node].peer_offset);
  }
}

// A group's shrink: the world's newest epoch at this peer (made by the world's shrink or grow,
// or here by a shrink of the world without exclusions when it has none newer than the group's),
// then the group of the members still in it, less `exclude` (ranks of the group), in rank order.
Result<Peer> shrink_group(const std::shared_ptr<PeerState>& s, const std::vector<uint32_t>& exclude) {
  if (!s->global) return Status(Errc::invalid_argument, "shrink is for multi-node collectives (num_nodes > 0)");
  if (s->destroyed) return Status(Errc::invalid_argument, "shrink of group " + std::to_string(s->group) + ", destroyed already");
  for (uint32_t r : exclude)
    if (r >= s->members.size())
      return Status(Errc::invalid_argument, "shrink: rank " + std::to_string(r) + " is not one of group " +
                                                std::to_string(s->group) + "'s " + std::to_string(s->members.size()));
  std::vector<std::optional<PeerId>> ids(s->members.begin(), s->members.end());
  std::shared_ptr<PeerState> at = s;  // a handle of the epoch `ids` are numbered in
  Peer world;
  for (;;) {
    std::shared_ptr<PeerState> after;
    {
      std::lock_guard<std::mutex> lk(at->rt->global_mu);
      if (at->rt->successors_gone)
        return Status(Errc::invalid_argument, "shrink of group " + std::to_string(s->group) + " of epoch " +
                                                  std::to_string(at->global->topology().epoch) +
                                                  ": the world has changed twice since (shrink groups before the world's next change)");
      if (auto it = at->rt->successors.find(at->id); it != at->rt->successors.end()) after = it->second;
    }
    if (!after) break;
    carry(ids, *at->global, after->global->topology());
    at = after;
    world = PeerAccess::make(after);
  }
  if (!PeerAccess::state(world)) {
    auto w = next_epoch(s, RejoinData::Kind::shrink, {});
    if (!w) return Status(w.status().code(), "shrink of group " + std::to_string(s->group) + ": " + w.status().message());
    world = *w;
    carry(ids, *s->global, PeerAccess::state(world)->global->topology());
  }
  if (std::find(exclude.begin(), exclude.end(), s->rank) != exclude.end())
    return Status(Errc::revoked, "shrink of group " + std::to_string(s->group) + ": its rank " + std::to_string(s->rank) +
                                     " (this peer) is excluded; the world's new epoch holds it still");
  std::vector<PeerId> members;
  for (uint32_t r = 0; r < ids.size(); ++r)
    if (ids[r] && std::find(exclude.begin(), exclude.end(), r) == exclude.end()) members.push_back(*ids[r]);
  auto g = world.new_group(std::move(members));
  if (g)
    CHORUS_LOG(info, init, (LogWhere{world.node()}),
               "shrink of group " + std::to_string(s->group) + " to " + std::to_string(g->size()) + " of its " +
                   std::to_string(s->members.size()) + " peers: group " + std::to_string(g->group()) + " (epoch " +
                   std::to_string(world.epoch()) + ")");
  return g;
}

Status empty_handle(const char* what) { return Status(Errc::not_registered, std::string(what) + " on an empty Peer handle"); }

} // namespace

Result<Peer> Peer::shrink(std::vector<uint32_t> exclude) {
  if (!state_) return empty_handle("shrink");
  if (state_->group != 0) return shrink_group(state_, exclude);
  return next_epoch(state_, RejoinData::Kind::shrink, std::move(exclude));
}

Result<Peer> Peer::grow() {
  if (!state_) return empty_handle("grow");
  if (state_->group != 0)
    return Status(Errc::invalid_argument, "grow runs on the world's handle; make groups with the newcomers in the world it returns");
  return next_epoch(state_, RejoinData::Kind::grow, {});
}

Status Peer::revoke() {
  if (!state_) return Status(Errc::not_registered, "revoke on an empty Peer handle");
  if (!state_->global)
    return Status(Errc::invalid_argument, "revoke is for multi-node collectives (num_nodes > 0)");
  state_->global->revoke();
  return Status::ok();
}

uint32_t Peer::newcomers() const { return state_ && state_->global ? state_->global->newcomers() : 0; }

uint32_t Peer::epoch() const { return state_ && state_->global ? state_->global->topology().epoch : 0; }

} // namespace chorus
