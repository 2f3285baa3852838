#include "actors/global_client/node_session.hpp"

#include <algorithm>
#include <thread>

#include "actors/remoting.hpp"
#include "transport/door_passage.hpp"

namespace chorus {

Result<orchestrator_actor> connect_orchestrator(caf::actor_system& sys, const std::string& host, uint16_t port,
                                                const std::string& secret,
                                                std::chrono::steady_clock::time_point give_up) {
  const std::string where = host + ":" + std::to_string(port);
  // The passage watches the orchestrator's silence (remoting.hpp, LinkEnd::connecting). A system
  // configured otherwise has CAF's own check, which starts a connecting side's silence clock at
  // zero: a BASP heartbeat tick that falls between our handshake and the orchestrator's drops the
  // new connection as silent (connection_timeout) although nothing was wrong. Such a connection
  // is tried again (through the door again), after a pause that lets the orchestrator finish
  // with the one that was dropped.
  const auto silence = passage_silence(sys);
  // With TLS files, the link is TLS with them (the door must be a certified one: no fallback).
  auto certified = tls_context(sys);
  if (!certified) return certified.status();
  for (auto pause = std::chrono::milliseconds(50);; pause = std::min(pause * 2, std::chrono::milliseconds(400))) {
    auto passage = DoorPassage::open(host, port, secret, give_up, silence, certified->get());
    if (!passage) {
      const Status& s = passage.status();
      if (s.code() == Errc::auth_failed) return s;  // "wrong secret", as the orchestrator itself says it
      if (s.code() == Errc::version_mismatch)
        return Status(s.code(), "the orchestrator at " + where + " speaks another protocol: " + s.message());
      return Status(s.code() == Errc::timeout ? Errc::timeout : Errc::unreachable,
                    "cannot reach the orchestrator at " + where + ": " + s.message());
    }
    auto orch = connect_remote<orchestrator_actor>(sys, "127.0.0.1", passage->port());
    if (orch) return *orch;
    if (orch.error() != caf::sec::connection_timeout || std::chrono::steady_clock::now() + pause >= give_up) {
      const bool other_interface = orch.error() == caf::sec::unexpected_actor_messaging_interface;
      return Status(other_interface ? Errc::version_mismatch : Errc::unreachable,
                    (other_interface ? "the orchestrator at " + where + " speaks another protocol: "
                                     : "cannot reach the orchestrator at " + where + ": ") +
                        sys.render(orch.error()));
    }
    std::this_thread::sleep_for(pause);
  }
}

Result<std::shared_ptr<NodeSession>> NodeSession::join(caf::actor_system& sys, const std::string& host,
                                                       uint16_t port, const NodeRegisterData& reg,
                                                       std::chrono::milliseconds timeout,
                                                       std::function<void(const NodeLostData&)> on_lost,
                                                       std::function<void(const LinkLostData&)> on_link_lost,
                                                       orchestrator_actor via) {
  const std::string where = host + ":" + std::to_string(port);
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  // A newcomer's job runs already: its orchestrator is there, or gone with the job. A refused
  // connection is tried again only briefly, where a first join waits for a launcher that starts
  // it late; its timeout then bounds the wait for the members' grow alone.
  const auto reach = reg.newcomer ? std::min(give_up, std::chrono::steady_clock::now() + kNewcomerReach) : give_up;
  auto orch = via ? Result<orchestrator_actor>(via) : connect_orchestrator(sys, host, port, reg.secret, reach);
  if (!orch) {
    if (reg.newcomer && orch.status().code() != Errc::auth_failed && orch.status().code() != Errc::version_mismatch)
      return Status(orch.status().code(), orch.status().message() + " (a newcomer joins a running elastic job: has it ended?)");
    return orch.status();
  }
  std::shared_ptr<NodeSession> s(new NodeSession);
  s->events_ = std::make_shared<NodeEvents>();
  s->events_->on_lost = std::move(on_lost);
  s->events_->on_link_lost = std::move(on_link_lost);
  s->orch_ = *orch;
  s->node_ = sys.spawn(node_actor_impl, *orch, where, s->events_);
  timeout = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(give_up - std::chrono::steady_clock::now()),
                     std::chrono::milliseconds(1));
  Status status;
  caf::scoped_actor self{sys};
  // The node actor answers every join by its deadline (with the orchestrator's reply or its own);
  // this wait has a little slack on top. A rejection is passed on as the orchestrator words it
  // (every node of a collective reports the same one); what this node writes names the address.
  const auto waited = timeout + std::chrono::milliseconds(500);
  self->request(s->node_, waited, join_atom::value, encode_node_register(reg), caf::timespan{timeout})
      .receive(
          [&](Envelope& reply) {
            std::string error;
            auto d = decode_node_register_reply(reply, error);
            if (!d)
              status = Status(Errc::internal, "garbled registration reply from the orchestrator at " + where + ": " + error);
            else if (!d->status)
              status = d->status;
            else
              s->topology_ = std::move(d->topology);
          },
          [&](caf::error& err) { status = join_error(err, where, waited, sys.render(err)); });
  if (!status) {
    s->left_ = true;
    caf::anon_send_exit(s->node_, caf::exit_reason::user_shutdown);
    return status;
  }
  return s;
}

orchestrator_actor NodeSession::orchestrator() const {
  for (const auto& d : events_->lost())  // a link that garbled a notice is not trusted either
    if (d.node_id == NodeEvents::kOrchestrator || d.node_id == NodeEvents::kGarbledNotice) return {};
  return orch_;
}

void NodeSession::leave() {
  if (left_) return;
  left_ = true;
  caf::anon_send(node_, node_leave_atom::value, encode_node_leave({topology_.collective, topology_.node_id}));
}

std::function<void(const LinkLostData&)> NodeSession::link_reporter() const {
  return [node = node_](const LinkLostData& l) { caf::anon_send(node, link_report_atom::value, encode_link_lost(l)); };
}

void NodeSession::revoke(uint64_t collective, uint32_t node, uint64_t ticket) const {
  caf::anon_send(node_, revoke_atom::value, collective, node, ticket);
}

NodeSession::~NodeSession() { leave(); }

bool NodeSession::wait_newcomers(uint32_t n, Clock::time_point deadline) const {
  for (;;) {
    const uint32_t seen = events_->newcomer_notices.value.load();
    if (events_->newcomers.load() >= n) return true;
    if (Clock::now() >= deadline) return false;
    events_->newcomer_notices.sleep(seen, deadline);
  }
}

} // namespace chorus
