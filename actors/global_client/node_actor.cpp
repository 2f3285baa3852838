#include "actors/global_client/node_actor.hpp"

#include <optional>
#include <string>

namespace chorus {

void NodeEvents::add(NodeLostData d) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    lost_.push_back(d);
  }
  if (on_lost) on_lost(d);
}

std::vector<NodeLostData> NodeEvents::lost() const {
  std::lock_guard<std::mutex> lk(mu_);
  return lost_;
}

namespace {

struct NodeState {
  std::optional<caf::typed_response_promise<Envelope>> join;  // the join waiting for its answer
  void answer(Envelope reply) {
    if (!join) return;
    join->deliver(std::move(reply));
    join.reset();
  }
  void fail(Status why) { answer(encode_node_register_reply(why)); }
};

} // namespace

node_actor::behavior_type node_actor_impl(node_actor::pointer self, orchestrator_actor orch,
                                          std::shared_ptr<NodeEvents> events) {
  auto st = std::make_shared<NodeState>();
  self->monitor(orch);
  // CAF fails no request to a node that is gone (it waits for its timeout): the loss answers the
  // join at once.
  self->set_down_handler([st, events](caf::down_msg& dm) {
    const std::string why = "orchestrator lost: " + caf::to_string(dm.reason);
    st->fail(Status(Errc::unreachable, "the " + why + " before it answered the registration"));
    events->add({0, NodeEvents::kOrchestrator, why});
  });
  return {
      [self, orch, st](join_atom, Envelope& reg, caf::timespan deadline) -> caf::result<Envelope> {
        if (st->join)
          return encode_node_register_reply({Errc::register_twice, "this node is already joining"});
        auto rp = self->make_response_promise<Envelope>();
        st->join = rp;
        self->request(orch, deadline, register_atom::value, std::move(reg))
            .then([st](Envelope& reply) { st->answer(std::move(reply)); },
                  [st, deadline](caf::error& err) {
                    if (err == caf::sec::request_timeout)
                      st->fail(Status(Errc::timeout, "the orchestrator did not answer the registration within " +
                                                         std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(deadline).count()) +
                                                         " ms"));
                    else
                      st->fail(Status(Errc::unreachable, "registration failed: " + caf::to_string(err)));
                  });
        return rp;
      },
      [self, orch](node_leave_atom, Envelope& leave) {
        self->send(orch, node_leave_atom::value, std::move(leave));
        self->quit();
      },
      [events](node_lost_atom, const Envelope& e) {
        std::string error;
        auto d = decode_node_lost(e, error);
        events->add(d ? *d : NodeLostData{0, NodeEvents::kOrchestrator, "garbled notice from the orchestrator: " + error});
      },
  };
}

} // namespace chorus
