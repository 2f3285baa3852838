#include "actors/orchestrator/orchestrator.hpp"

#include <algorithm>
#include <memory>
#include <random>

#include "actors/orchestrator/basp_server.hpp"
#include "actors/orchestrator/last_heard.hpp"
#include "actors/unexpected_messages.hpp"
#include "core/log.hpp"
#include "core/secret.hpp"
#include "messages/status_codec.hpp"

namespace chorus {

namespace {

// Why a node's actor went down, in words (it is what every survivor reads). BASP says only that
// the node's connection is gone, which is both an exit and heartbeats missed past the limit; the
// front door's relay saw which (last_heard.hpp), where it stands between them (not under TLS).
std::string down_reason(const caf::error& reason, const caf::actor_addr& source) {
  if (reason == caf::exit_reason::remote_link_unreachable) {
    if (auto words = loss_words(last_heard().of(node_id_bytes(source.node())))) return *words;
    return "its connection to the orchestrator ended (the process exited, or was silent past the heartbeat limit)";
  }
  return "its actor went down (" + caf::to_string(reason) + ")";
}
struct ShellState {
  explicit ShellState(OrchestratorCore::Options o) : core(with_random_tokens(std::move(o))) {}
  static OrchestratorCore::Options with_random_tokens(OrchestratorCore::Options o) {
    // Tokens and tickets prove membership: each drawn from the kernel's CSPRNG, never from a
    // generator whose seed could be searched (random_device, should the kernel have none).
    if (!o.token_source)
      o.token_source = [] {
        uint64_t v = 0;
        if (!random_bytes(&v, sizeof v)) {
          std::random_device rd;
          v = (uint64_t{rd()} << 32) | rd();
        }
        return v;
      };
    return o;
  }
  OrchestratorCore core;
  uint64_t next_key = 1;
  std::map<caf::actor_addr, OrchestratorCore::NodeKey> keys;
  struct Node {
    node_notice_actor handle;
    std::optional<caf::typed_response_promise<Envelope>> pending;
    std::optional<Envelope> answered;  // the topology it was sent (a repeated request gets it again)
  };
  std::map<OrchestratorCore::NodeKey, Node> nodes;
};

void apply(orchestrator_actor::pointer self, ShellState& st, OrchestratorCore::Effects fx) {
  for (auto k : fx.watch) {
    auto it = st.nodes.find(k);
    if (it != st.nodes.end()) self->monitor(it->second.handle);
  }
  for (auto& r : fx.replies) {
    if (r.status)
      CHORUS_LOG(info, orch, (LogWhere{r.topology.node_id}),
                 "admitted to collective " + std::to_string(r.topology.collective) + " (" +
                     std::to_string(r.topology.num_nodes) + " nodes, " + std::to_string(r.topology.total_peers) + " peers)");
    else
      CHORUS_LOG(info, orch, LogWhere{}, "a node's registration answered: " + r.status.to_string());
    auto it = st.nodes.find(r.to);
    if (it == st.nodes.end() || !it->second.pending) continue;
    auto reply = encode_node_register_reply(r.status, r.topology);
    if (r.status) it->second.answered = reply;
    it->second.pending->deliver(std::move(reply));
    it->second.pending.reset();
  }
  for (auto& n : fx.notices)
    CHORUS_LOG(info, orch, (LogWhere{n.lost.node_id}), "node lost, telling the others: " + n.lost.reason);
  // A notice to a node the shell still knows (one forgotten meanwhile gets none).
  auto tell = [&](OrchestratorCore::NodeKey to, auto&&... message) {
    auto it = st.nodes.find(to);
    if (it != st.nodes.end()) self->send(it->second.handle, std::forward<decltype(message)>(message)...);
  };
  for (auto& n : fx.notices) tell(n.to, node_lost_atom::value, encode_node_lost(n.lost));
  for (auto& n : fx.link_notices) tell(n.to, link_lost_atom::value, encode_link_lost(n.link));
  for (auto& n : fx.revoke_notices) tell(n.to, revoke_atom::value, n.collective, n.by);
  if (!fx.revoke_notices.empty())
    CHORUS_LOG(info, orch, (LogWhere{fx.revoke_notices[0].by}), "revoked collective " +
                                                                     std::to_string(fx.revoke_notices[0].collective) + ", telling the others");
  for (auto& n : fx.newcomer_notices) tell(n.to, newcomers_atom::value, n.collective, n.waiting);
  if (!fx.link_notices.empty())
    CHORUS_LOG(info, orch, (LogWhere{fx.link_notices[0].link.reporter}),
               "telling the others: " + link_lost_message(fx.link_notices[0].link));
  if (!fx.ignored.empty()) CHORUS_LOG(info, orch, LogWhere{}, "ignored " + fx.ignored);
  for (auto k : fx.forget) {
    auto it = st.nodes.find(k);
    if (it == st.nodes.end()) continue;
    self->demonitor(it->second.handle.address());
    st.keys.erase(it->second.handle.address());
    st.nodes.erase(it);
  }
  if (fx.timer)
    self->delayed_send(self, fx.timer->second, timeout_atom::value, fx.timer->first);
}

// A status request: asks every member node at once and answers when all have answered or
// kStatusWait has passed for each (a node that did not answer is named as silent).
caf::result<Envelope> job_status(orchestrator_actor::pointer self, ShellState& st, const Envelope& e) {
  std::string error;
  auto req = decode_status_request(e, error);
  JobStatusData j;
  if (!req) j.status = {Errc::invalid_argument, "a status request that does not decode"};  // no parser text back
  if (!j.status) return encode_job_status(j);
  j.collective = st.core.collective();
  j.expected_nodes = st.core.options().expected_nodes;
  j.registered_nodes = static_cast<uint32_t>(st.core.registered());
  j.epoch = st.core.epoch();
  j.newcomers = static_cast<uint32_t>(st.core.newcomers());
  j.complete = st.core.complete();
  j.members = st.core.membership();
  const auto keys = st.core.member_keys();
  // Asked: the nodes still in (a node lost or gone is reported as such, not as silent).
  std::vector<uint32_t> ask;
  for (uint32_t id = 0; id < keys.size(); ++id)
    if (j.members.empty() || j.members[id].state == JobMemberData::State::joined) ask.push_back(id);
  if (ask.empty()) return encode_job_status(j);
  struct Gather {
    JobStatusData job;
    std::size_t left;
    caf::typed_response_promise<Envelope> rp;
    void one_done() {
      if (--left) return;
      std::sort(job.nodes.begin(), job.nodes.end(), [](const auto& a, const auto& b) { return a.node < b.node; });
      std::sort(job.silent.begin(), job.silent.end());
      rp.deliver(encode_job_status(job));
    }
  };
  auto g = std::make_shared<Gather>(Gather{std::move(j), ask.size(), self->make_response_promise<Envelope>()});
  for (uint32_t id : ask) {
    auto it = st.nodes.find(keys[id]);
    if (it == st.nodes.end()) {
      g->job.silent.push_back(id);
      g->one_done();
      continue;
    }
    self->request(it->second.handle, kStatusWait, status_atom::value, Envelope{})
        .then(
            [g, id](Envelope& reply) {
              std::string err;
              auto n = decode_node_status(reply, err);
              if (n) g->job.nodes.push_back(std::move(*n));
              else g->job.silent.push_back(id);
              g->one_done();
            },
            [g, id](caf::error&) {
              g->job.silent.push_back(id);
              g->one_done();
            });
  }
  return g->rp;
}
} // namespace

void orchestrator_self::enqueue(caf::mailbox_element_ptr what, caf::execution_unit* host) {
  if (what && what->content().match_elements<caf::exit_msg>()) {
    // anon_send_exit from one of this process's threads comes without a sender and without an
    // execution unit; BASP delivers a remote message on one (its worker's or the multiplexer's)
    // whatever sender or source it claims.
    const auto& msg = what->content().get_as<caf::exit_msg>(0);
    if (what->sender || host != nullptr || msg.source.node() != node()) {
      CHORUS_LOG(info, orch, LogWhere{}, "an exit message not sent by this process's own threads ignored (" +
                                             caf::to_string(msg.reason) + ")");
      return;
    }
  }
  orchestrator_actor::base::enqueue(std::move(what), host);
}

orchestrator_actor::behavior_type orchestrator(orchestrator_self* self, OrchestratorCore::Options opts) {
  auto st = std::make_shared<ShellState>(std::move(opts));
  drop_unexpected_quietly(self);
  self->set_down_handler([self, st](caf::down_msg& dm) {
    auto it = st->keys.find(dm.source);
    if (it == st->keys.end()) return;
    apply(self, *st, st->core.on_down(it->second, down_reason(dm.reason, dm.source)));
  });
  // A key per distinct sender actor; a non-member's entry only lives while it waits for a reply.
  auto key_of = [self, st]() -> std::optional<OrchestratorCore::NodeKey> {
    auto sender = caf::actor_cast<node_notice_actor>(self->current_sender());
    if (!sender) return std::nullopt;
    auto [it, fresh] = st->keys.emplace(sender.address(), 0);
    if (fresh) {
      it->second = st->next_key++;
      st->nodes[it->second].handle = sender;
    }
    return it->second;
  };
  return {
      [self, st, key_of](register_atom, const Envelope& e) -> caf::result<Envelope> {
        auto key = key_of();
        if (!key) return encode_node_register_reply({Errc::invalid_argument, "anonymous register request"});
        // A node sends one request (actors/global_client/node_actor.cpp); these two answers only
        // keep a misbehaving node from confusing the admission: a repeat while the first waits is
        // told so, a repeat after the answer gets the answer again.
        if (st->nodes[*key].pending) return encode_node_register_reply({Errc::register_twice, kSuperseded});
        if (st->nodes[*key].answered) return *st->nodes[*key].answered;
        auto rp = self->make_response_promise<Envelope>();
        st->nodes[*key].pending = rp;
        std::string error;
        auto d = decode_node_register(e, error);
        if (!d) CHORUS_LOG(info, orch, LogWhere{}, "a garbled registration: " + error);
        auto fx = d ? st->core.on_register(*key, *d) : st->core.on_garbled(*key);
        if (d && !fx.watch.empty())  // admitted to wait: said, so a launch can be followed (and tested)
          CHORUS_LOG(info, orch, LogWhere{},
                     "the node at " + d->data_address + " registered (" + std::to_string(st->core.registered()) +
                         " of " + std::to_string(st->core.options().expected_nodes) + ")");
        apply(self, *st, std::move(fx));
        // A rejected sender that is no member: drop its bookkeeping (members stay, monitored).
        auto it = st->nodes.find(*key);
        if (it != st->nodes.end() && !it->second.pending && !st->core.is_member(*key)) {
          st->keys.erase(it->second.handle.address());
          st->nodes.erase(it);
        }
        return rp;
      },
      [self, st](node_leave_atom, const Envelope&) {
        auto sender = self->current_sender();
        if (!sender) return;
        auto it = st->keys.find(sender->address());
        if (it == st->keys.end()) return;
        apply(self, *st, st->core.on_leave(it->second));
      },
      [self, st](link_lost_atom, const Envelope& e) {
        // Only from a member (a key the orchestrator gave when it registered): nobody else is known.
        auto sender = self->current_sender();
        auto it = sender ? st->keys.find(sender->address()) : st->keys.end();
        if (it == st->keys.end()) return;
        std::string error;
        auto l = decode_link_lost(e, error);
        if (!l) {
          CHORUS_LOG(info, orch, LogWhere{}, "a garbled link report: " + error);
          return;
        }
        apply(self, *st, st->core.on_link_lost(it->second, *l));
      },
      [self, st](revoke_atom, uint64_t collective, uint32_t node, uint64_t ticket) {
        auto sender = self->current_sender();  // only a member's key counts, as for link reports
        auto it = sender ? st->keys.find(sender->address()) : st->keys.end();
        if (it == st->keys.end()) return;
        apply(self, *st, st->core.on_revoke(it->second, collective, node, ticket));
      },
      [st](caf::get_atom) {
        return std::make_tuple(st->core.collective(), static_cast<uint64_t>(st->core.registered()),
                               st->core.complete());
      },
      [self, st](status_atom, const Envelope& e) { return job_status(self, *st, e); },
      [self, st](timeout_atom, uint64_t timer) {
        // Only the timers this actor set itself: a timeout from anyone else could abort an
        // admission in progress.
        if (self->current_sender() != caf::actor_cast<caf::strong_actor_ptr>(self)) return;
        apply(self, *st, st->core.on_timeout(timer));
      },
  };
}

} // namespace chorus
