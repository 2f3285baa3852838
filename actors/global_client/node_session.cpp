#include "actors/global_client/node_session.hpp"

#include <limits>

#include "actors/orchestrator/orchestrator.hpp"
#include "core/wait.hpp"

namespace chorus {

namespace {

// One registration in flight: sent again every second until an answer comes or its deadline
// passes. A request lost on the way (seen rarely when several nodes connect at once) is thus
// repaired; the orchestrator takes a repeat from the same node as the same registration.
struct Registration {
  caf::response_promise rp;
  Envelope message;
  Clock::time_point deadline;
  bool done = false;
  bool heard = false;  // any answer came back (the connection carries our messages)
  int sent = 0;
};
// Sends without any answer, not even "superseded", after which the connection is taken as dead.
constexpr int kSilentAttempts = 3;
using resend_atom = caf::atom_constant<caf::atom("resend")>;
constexpr auto kResend = std::chrono::seconds(1);

void attempt(caf::event_based_actor* self, const caf::actor& orch, std::shared_ptr<Registration> r) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(r->deadline - Clock::now());
  if (left.count() <= 0) {
    if (!r->done) {
      r->done = true;
      r->rp.deliver(caf::make_error(caf::sec::request_timeout));
    }
    return;
  }
  ++r->sent;
  self->request(orch, left, register_atom::value, r->message)
      .then(
          [r](Envelope& reply) {
            r->heard = true;
            if (r->done) return;
            std::string error;
            auto d = decode_node_register_reply(reply, error);
            if (d && d->status.code() == Errc::register_twice && d->status.message() == kSuperseded) return;
            r->done = true;
            r->rp.deliver(std::move(reply));
          },
          [r](caf::error& err) {
            // A timeout is answered by the deadline path; other errors end the registration.
            if (r->done || err == caf::sec::request_timeout) return;
            r->done = true;
            r->rp.deliver(std::move(err));
          });
}

// Forwards the register request (with a deadline) and the leave; collects NodeLost notices.
caf::behavior node_client(caf::event_based_actor* self, caf::actor orch, std::chrono::milliseconds timeout,
                          std::shared_ptr<NodeSession::Shared> shared) {
  self->monitor(orch);
  self->set_down_handler([shared](caf::down_msg& dm) {
    shared->add({0, std::numeric_limits<uint32_t>::max(), "orchestrator lost: " + caf::to_string(dm.reason)});
  });
  auto current = std::make_shared<std::shared_ptr<Registration>>();
  return {
      [self, orch, timeout, current](register_atom, const Envelope& e) -> caf::result<Envelope> {
        auto r = std::make_shared<Registration>();
        r->rp = self->make_response_promise<Envelope>();
        r->message = e;
        r->deadline = Clock::now() + timeout;
        *current = r;
        attempt(self, orch, r);
        self->delayed_send(self, kResend, resend_atom::value);
        return r->rp;
      },
      [self, orch, current](resend_atom) {
        auto r = *current;
        if (!r || r->done) return;
        if (!r->heard && r->sent >= kSilentAttempts) {
          // Nothing ever came back: this connection loses our messages; the caller reconnects.
          r->done = true;
          r->rp.deliver(caf::make_error(caf::sec::no_context));
          return;
        }
        attempt(self, orch, r);
        if (!r->done) self->delayed_send(self, kResend, resend_atom::value);
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
            else if (!d->status.is_ok())
              status = d->status;
            else
              s->topology_ = std::move(d->topology);
          },
          [&](caf::error& err) {
            if (err == caf::sec::no_context)
              status = Status(Errc::unreachable, "the orchestrator at " + host + ":" + std::to_string(port) +
                                                     " never answered (connection lost)");
            else
              status = Status(err == caf::sec::request_timeout ? Errc::timeout : Errc::internal,
                              "registration with the orchestrator at " + host + ":" + std::to_string(port) +
                                  " failed: " + sys.render(err));
          });
  if (!status.is_ok()) {
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
