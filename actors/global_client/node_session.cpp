#include "actors/global_client/node_session.hpp"

namespace chorus {

Result<std::shared_ptr<NodeSession>> NodeSession::join(caf::actor_system& sys, const std::string& host,
                                                       uint16_t port, const NodeRegisterData& reg,
                                                       std::chrono::milliseconds timeout,
                                                       std::function<void(const NodeLostData&)> on_lost) {
  const std::string where = host + ":" + std::to_string(port);
  auto orch = connect_remote<orchestrator_actor>(sys, host, port);
  if (!orch) {
    const bool other_interface = orch.error() == caf::sec::unexpected_actor_messaging_interface;
    return Status(other_interface ? Errc::version_mismatch : Errc::unreachable,
                  (other_interface ? "the orchestrator at " + where + " speaks another protocol: "
                                   : "cannot reach the orchestrator at " + where + ": ") +
                      sys.render(orch.error()));
  }
  std::shared_ptr<NodeSession> s(new NodeSession);
  s->events_ = std::make_shared<NodeEvents>();
  s->events_->on_lost = std::move(on_lost);
  s->node_ = sys.spawn(node_actor_impl, *orch, where, s->events_);
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

void NodeSession::leave() {
  if (left_) return;
  left_ = true;
  caf::anon_send(node_, node_leave_atom::value, encode_node_leave({topology_.collective, topology_.node_id}));
}

NodeSession::~NodeSession() { leave(); }

} // namespace chorus
