#include "actors/node_registration.hpp"

#include <limits>

namespace chorus {

namespace {

// Forwards the register request (with a deadline) and the leave; collects NodeLost notices.
caf::behavior node_client(caf::event_based_actor* self, caf::actor orch, std::chrono::milliseconds timeout,
                          std::shared_ptr<NodeSession::Shared> shared) {
  self->monitor(orch);
  self->set_down_handler([shared](caf::down_msg& dm) {
    shared->add({0, std::numeric_limits<uint32_t>::max(), "orchestrator lost: " + caf::to_string(dm.reason)});
  });
  return {
      [self, orch, timeout](register_atom, const Envelope& e) -> caf::result<Envelope> {
        auto rp = self->make_response_promise<Envelope>();
        self->request(orch, timeout, register_atom::value, e)
            .then([rp](Envelope& reply) mutable { rp.deliver(std::move(reply)); },
                  [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
        return rp;
      },
      [shared](node_lost_atom, const Envelope& e) {
        std::string error;
        auto d = decode_node_lost(e, error);
        shared->add(d ? *d : NodeLostData{0, std::numeric_limits<uint32_t>::max(), error});
      },
      [self, orch](node_leave_atom, const Envelope& e) {
        self->send(orch, node_leave_atom::value, e);
        self->quit();
      },
  };
}

} // namespace

Result<std::shared_ptr<NodeSession>> NodeSession::join(caf::actor_system& sys, const std::string& host,
                                                       uint16_t port, const NodeRegisterData& reg,
                                                       std::chrono::milliseconds timeout,
                                                       std::function<void(const NodeLostData&)> on_lost) {
  auto orch = connect_remote(sys, host, port);
  if (!orch)
    return Status(Errc::unreachable, "cannot reach the orchestrator at " + host + ":" +
                                              std::to_string(port) + ": " + sys.render(orch.error()));
  std::shared_ptr<NodeSession> s(new NodeSession);
  s->shared_ = std::make_shared<Shared>();
  s->shared_->on_lost = std::move(on_lost);
  s->node_ = sys.spawn(node_client, *orch, timeout, s->shared_);
  Status status;
  caf::scoped_actor self{sys};
  // The node actor's own request gives up after `timeout`; this wait has a little slack on top.
  self->request(s->node_, timeout + std::chrono::milliseconds(500), register_atom::value,
                encode_node_register(reg))
      .receive(
          [&](Envelope& reply) {
            std::string error;
            auto d = decode_node_register_reply(reply, error);
            if (!d)
              status = Status(Errc::internal, "orchestrator reply: " + error);
            else if (!d->status)
              status = d->status;
            else
              s->topology_ = std::move(d->topology);
          },
          [&](caf::error& err) {
            status = Status(err == caf::sec::request_timeout ? Errc::timeout : Errc::internal,
                            "registration with the orchestrator at " + host + ":" + std::to_string(port) +
                                " failed: " + sys.render(err));
          });
  if (!status) {
    s->left_ = true;
    caf::anon_send_exit(s->node_, caf::exit_reason::user_shutdown);
    return status;
  }
  return s;
}

std::vector<NodeLostData> NodeSession::lost() const {
  std::lock_guard<std::mutex> lk(shared_->mu);
  return shared_->lost;
}

void NodeSession::leave() {
  if (left_) return;
  left_ = true;
  caf::anon_send(node_, node_leave_atom::value, encode_node_leave({topology_.collective, topology_.node_id}));
}

NodeSession::~NodeSession() { leave(); }

} // namespace chorus
