// What the orchestrator tests (orchestrator_*_test.cpp) and their node
// process (orchestrator_node.cpp) share: what a node sends to register (the same configuration
// everywhere but the node's own fields), and an actor system set up for remoting.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include <caf/all.hpp>

#include "actors/remoting.hpp"
#include "messages/node_codec.hpp"
#include "messages/peer_codec.hpp"

namespace chorus::testing {

inline Config node_config(uint32_t nodes, uint32_t peers, const std::string& addr) {
  Config c;
  c.num_devices = peers;
  c.num_nodes = nodes;
  c.orchestrator_address = "127.0.0.1:4000";
  c.node_address = addr;
  return c;
}

inline NodeRegisterData reg(uint32_t nodes, uint32_t peers, const std::string& addr,
                            const std::string& secret = "s3") {
  return {protocol_version(), secret, node_config(nodes, peers, addr), peers, addr, 0, ""};
}

// An actor system with its config (which must outlive it), set up for remoting.
struct System {
  System() {
    configure_remoting(cfg);
    cfg.set("scheduler.max-threads", 2);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
  caf::actor_system& operator*() { return *sys; }
  caf::actor_system* operator->() { return sys.get(); }
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
};

} // namespace chorus::testing
