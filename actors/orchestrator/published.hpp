// The orchestrator as nodes reach it: its actor published for CAF on 127.0.0.1 only (a free
// port), and the front door (transport/front_door.hpp) on the public address, through which alone
// a connection from elsewhere reaches that port: CAF's BASP parses nothing a stranger sends.
// Nodes and chorus-ctl pass the door with connect_orchestrator()
// (actors/global_client/node_session.hpp).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <chorus/result.hpp>
#include "actors/orchestrator/orchestrator.hpp"

namespace chorus {

class FrontDoor;

class PublishedOrchestrator {
 public:
  struct Options {
    std::string host = "127.0.0.1";  // the public address
    uint16_t port = 0;               // 0: a free port
    std::string secret;              // the door's challenge (empty: none)
    std::chrono::milliseconds handshake_timeout{2000};
  };
  // Publishes `orch` (with TLS when `sys` uses it) and opens its door.
  static Result<std::unique_ptr<PublishedOrchestrator>> publish(caf::actor_system& sys, const orchestrator_actor& orch,
                                                                const Options& opts);
  // Closes the door (and every connection through it: the nodes hear the orchestrator is lost),
  // then unpublishes the actor.
  ~PublishedOrchestrator();
  PublishedOrchestrator(const PublishedOrchestrator&) = delete;
  PublishedOrchestrator& operator=(const PublishedOrchestrator&) = delete;

  uint16_t port() const { return port_; }              // the door's
  uint16_t inner_port() const { return inner_port_; }  // CAF's, on 127.0.0.1

 private:
  PublishedOrchestrator(caf::actor_system& sys, orchestrator_actor orch);
  caf::actor_system& sys_;
  orchestrator_actor orch_;
  uint16_t inner_port_ = 0;
  uint16_t port_ = 0;
  std::unique_ptr<FrontDoor> door_;
};

} // namespace chorus
