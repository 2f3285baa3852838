#include "actors/global_client/node_actor.hpp"

#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>

#include "actors/unexpected_messages.hpp"
#include "messages/status_codec.hpp"

namespace chorus {

void NodeEvents::add(NodeLostData d) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    lost_.push_back(d);
  }
  if (on_lost) on_lost(d);
}

void NodeEvents::add_link(const LinkLostData& l) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    lost_.push_back({l.collective, kLinkNotice, link_lost_message(l)});
  }
  if (on_link_lost) on_link_lost(l);
}

std::vector<NodeLostData> NodeEvents::lost() const {
  std::lock_guard<std::mutex> lk(mu_);
  return lost_;
}

void NodeEvents::set_status_source(std::function<Envelope()> source) {
  std::lock_guard<std::mutex> lk(mu_);
  status_ = std::move(source);
}

Envelope NodeEvents::status() const {
  std::function<Envelope()> source;
  {
    std::lock_guard<std::mutex> lk(mu_);
    source = status_;
  }
  if (source) return source();  // without mu_: it takes other locks
  NodeStatusData n;
  n.pid = ::getpid();
  n.note = "not running ops yet";
  return encode_node_status(n);
}

namespace {

struct NodeState {
  std::optional<caf::typed_response_promise<Envelope>> join;  // the join waiting for its answer
  std::optional<Status> lost;  // the orchestrator is gone: how (a later join is answered with it)
  void answer(Envelope reply) {
    if (!join) return;
    join->deliver(std::move(reply));
    join.reset();
  }
  void fail(Status why) { answer(encode_node_register_reply(why)); }
};

// A notice from the orchestrator that does not decode: some node or link may be lost, which one
// is unknown, and a link that garbles messages is not trusted (a join still waiting fails).
void garbled_notice(NodeState& st, NodeEvents& events, const char* what, const std::string& where,
                    const std::string& error) {
  const std::string why = std::string("garbled ") + what + " notice from the orchestrator at " + where + " (" + error +
                          "): a node may be lost, which one is unknown";
  st.fail(Status(Errc::unreachable, why));
  events.add({0, NodeEvents::kGarbledNotice, why});
}

} // namespace

std::string revoked_message(uint64_t collective, uint32_t by) {
  return "collective " + std::to_string(collective) + " was revoked by node " + std::to_string(by) +
         " (Peer::revoke): only shrink() or grow() go on from it";
}

Status join_error(const caf::error& err, const std::string& where, caf::timespan waited, const std::string& rendered) {
  if (err == caf::sec::request_timeout)
    return Status(Errc::timeout, "the orchestrator at " + where + " did not answer the registration within " +
                                     std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()) +
                                     " ms");
  for (auto lost : {caf::sec::request_receiver_down, caf::sec::no_route_to_receiving_node,
                    caf::sec::cannot_forward_to_invalid_actor, caf::sec::disconnect_during_handshake,
                    caf::sec::cannot_connect_to_node, caf::sec::remote_linking_failed, caf::sec::socket_disconnected,
                    caf::sec::connection_timeout})
    if (err == lost) return Status(Errc::unreachable, "the orchestrator at " + where + " cannot be reached: " + rendered);
  return Status(Errc::internal, "registration with the orchestrator at " + where + " failed: " + rendered);
}

node_actor::behavior_type node_actor_impl(node_actor::pointer self, orchestrator_actor orch, std::string where,
                                          std::shared_ptr<NodeEvents> events) {
  auto st = std::make_shared<NodeState>();
  drop_unexpected_quietly(self);
  self->monitor(orch);
  // CAF fails no request to a node that is gone (it waits for its timeout): the loss answers the
  // join at once, and a join that comes after it (the connection closed right after CAF's
  // handshake, and the monitor of a dead proxy fired first) is answered with it.
  self->set_down_handler([st, events, where](caf::down_msg& dm) {
    const std::string why = "orchestrator lost: " + where + " went down (" + caf::to_string(dm.reason) + ")";
    st->lost = Status(Errc::unreachable, why + " before it answered the registration");
    st->fail(*st->lost);
    events->add({0, NodeEvents::kOrchestrator, why});
  });
  return {
      [self, orch, st, where](join_atom, Envelope& reg, caf::timespan deadline) -> caf::result<Envelope> {
        if (st->join)
          return encode_node_register_reply(
              {Errc::register_twice, "this node is already joining the orchestrator at " + where});
        if (st->lost) return encode_node_register_reply(*st->lost);
        auto rp = self->make_response_promise<Envelope>();
        st->join = rp;
        self->request(orch, deadline, register_atom::value, std::move(reg))
            .then([st](Envelope& reply) { st->answer(std::move(reply)); },
                  [self, st, where, deadline](caf::error& err) {
                    st->fail(join_error(err, where, deadline, self->system().render(err)));
                  });
        return rp;
      },
      [self, orch](node_leave_atom, Envelope& leave) {
        self->send(orch, node_leave_atom::value, std::move(leave));
        self->quit();
      },
      [events](status_atom, const Envelope&) { return events->status(); },
      [st, events, where](node_lost_atom, const Envelope& e) {
        std::string error;
        if (auto d = decode_node_lost(e, error)) return events->add(*d);
        garbled_notice(*st, *events, "NodeLost", where, error);
      },
      [st, events, where](link_lost_atom, const Envelope& e) {
        std::string error;
        if (auto l = decode_link_lost(e, error)) return events->add_link(*l);
        garbled_notice(*st, *events, "LinkLost", where, error);
      },
      [self, orch](link_report_atom, Envelope& report) { self->send(orch, link_lost_atom::value, std::move(report)); },
      [self, orch](revoke_atom, uint64_t collective, uint32_t node, uint64_t ticket) {
        self->send(orch, revoke_atom::value, collective, node, ticket);
      },
      [events](revoke_atom, uint64_t collective, uint32_t by) {
        events->add({collective, NodeEvents::kRevokeNotice, revoked_message(collective, by)});
      },
      [events](newcomers_atom, uint64_t, uint32_t waiting) {
        events->newcomers.store(waiting);
        events->newcomer_notices.set(events->newcomer_notices.value.load() + 1);
      },
  };
}

} // namespace chorus
