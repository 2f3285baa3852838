// Peer::shrink and Peer::grow (docs/elastic.md): the node joins the next membership epoch of its
// collective as a successor runtime (runtime_impl.hpp, `next`) whose join presents the member it
// was; the orchestrator forms the epoch once every member still alive has come
// (actors/orchestrator/orchestrator_epochs.cpp). The old world is then retired here.
#include <algorithm>

#include <chorus/peer.hpp>

#include "actors/global_client/global_client.hpp"
#include "actors/runtime_impl.hpp"
#include "core/log.hpp"

namespace chorus {

namespace {

Result<Peer> next_epoch(const std::shared_ptr<PeerState>& s, RejoinData::Kind kind, std::vector<uint32_t> exclude) {
  const std::string what(to_string(kind));
  if (!s) return Status(Errc::not_registered, what + " on an empty Peer handle");
  if (s->group != 0)
    return Status(Errc::invalid_argument, what + " runs on the world's handle; make the groups again in the world it returns");
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
    if (!rt.next) {
      rt.next = std::make_shared<RuntimeImpl>(**sys);
      rt.next->rejoin = {kind, t.collective, t.node_id, t.ticket, nodes};
      rt.next->flight = rt.flight;  // one recorder and one trace per process, whatever the epoch
      rt.next->trace = rt.trace;
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
  rt.retire(Status(Errc::revoked, "collective " + std::to_string(t.collective) + " was left for its next epoch by a " + what));
  CHORUS_LOG(info, init, (LogWhere{t.node_id}),
             what + " to " + std::to_string(p->size()) + " peers (epoch " + std::to_string(p->epoch()) + ") in " +
                 std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count()) + " ms");
  return p;
}

} // namespace

Result<Peer> Peer::shrink(std::vector<uint32_t> exclude) {
  return next_epoch(state_, RejoinData::Kind::shrink, std::move(exclude));
}

Result<Peer> Peer::grow() { return next_epoch(state_, RejoinData::Kind::grow, {}); }

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
