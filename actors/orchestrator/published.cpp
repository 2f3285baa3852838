#include "actors/orchestrator/published.hpp"

#include "transport/front_door.hpp"

namespace chorus {

PublishedOrchestrator::PublishedOrchestrator(caf::actor_system& sys, orchestrator_actor orch)
    : sys_(sys), orch_(std::move(orch)) {}

Result<std::unique_ptr<PublishedOrchestrator>> PublishedOrchestrator::publish(caf::actor_system& sys,
                                                                              const orchestrator_actor& orch,
                                                                              const Options& opts) {
  std::unique_ptr<PublishedOrchestrator> p(new PublishedOrchestrator(sys, orch));
  auto inner = publish_remote(sys, orch, 0, "127.0.0.1");
  if (!inner)
    return Status(Errc::unreachable, "cannot publish the orchestrator on 127.0.0.1: " + sys.render(inner.error()));
  p->inner_port_ = *inner;
  FrontDoor::Options d;
  d.host = opts.host;
  d.port = opts.port;
  d.inner_port = *inner;
  d.secret = opts.secret;
  d.handshake_timeout = opts.handshake_timeout;
  auto door = FrontDoor::open(std::move(d));
  if (!door) return door.status();  // p's destructor unpublishes
  p->door_ = std::move(*door);
  p->port_ = p->door_->port();
  return p;
}

PublishedOrchestrator::~PublishedOrchestrator() {
  door_.reset();
  if (inner_port_ != 0) (void)sys_.middleman().unpublish(orch_, inner_port_);
}

} // namespace chorus
