// What a node sends the orchestrator to register, for the orchestrator tests and their node
// process (orchestrator_node.cpp): the same configuration everywhere but the node's own fields.
#pragma once
#include <cstdint>
#include <string>

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
  return {protocol_version(), secret, node_config(nodes, peers, addr), peers, addr};
}

} // namespace chorus::testing
