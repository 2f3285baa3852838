// What the control-message codec tests share: messages with every field set, comparing configs
// field by field, and decoding an envelope as every message type (none may crash).
#pragma once
#include <gtest/gtest.h>

#include <capnp/schema.h>

#include <cstdint>
#include <string>

#include <chorus/config.hpp>
#include "chorus.capnp.h"
#include "messages/envelope.hpp"
#include "messages/node_codec.hpp"
#include "messages/peer_codec.hpp"

namespace chorus::testing {

// How many values each wire enum has, read from the schema, so these tests follow the protocol when
// an enum grows (the first out-of-range raw value is exactly this count).
template <class E>
inline uint16_t enum_count() {
  return static_cast<uint16_t>(capnp::Schema::from<E>().getEnumerants().size());
}

inline Config rich_config() {
  Config c;
  c.num_devices = 7;
  for (std::size_t k = 0; k < num_collective_kinds; ++k) {
    const char* names[] = {"auto", "centralized", "tree:3", "ring", "dbtree", "tree", "tree:5"};
    c.local[k] = *parse_strategy(names[k % 7]);
    c.global[k] = *parse_strategy(names[(k + 3) % 7]);
  }
  c.auto_threshold_bytes = 123456789;
  c.auto_tree_arity = 4;
  c.timeout = std::chrono::milliseconds(4321);
  c.num_nodes = 3;
  c.orchestrator_address = "orchestrator.example:7000";
  c.node_address = "node-2.example:7100";
  c.host_transport = HostTransport::network;
  return c;
}

inline void expect_same_config(const Config& a, const Config& b) {
  EXPECT_EQ(a.first_difference(b), "");
  EXPECT_TRUE(a == b);
  EXPECT_EQ(a.num_devices, b.num_devices);
  EXPECT_EQ(a.local, b.local);
  EXPECT_EQ(a.global, b.global);
  EXPECT_EQ(a.auto_threshold_bytes, b.auto_threshold_bytes);
  EXPECT_EQ(a.auto_tree_arity, b.auto_tree_arity);
  EXPECT_EQ(a.timeout, b.timeout);
  EXPECT_EQ(a.num_nodes, b.num_nodes);
  EXPECT_EQ(a.orchestrator_address, b.orchestrator_address);
  EXPECT_EQ(a.node_address, b.node_address);
  EXPECT_EQ(a.host_transport, b.host_transport);
}

inline NodeRegisterReplyData sample_reply() {
  TopologyData t;
  t.collective = 9;
  t.node_id = 1;
  t.num_nodes = 2;
  t.total_peers = 5;
  t.nodes = {{2, 0, "10.0.0.1:7000", 8}, {3, 2, "10.0.0.2:7000", 16}};
  t.token = 0xfeedULL;
  return {Status::ok(), t};
}

// Decodes e as every message type; none may crash. Returns how many decoded successfully.
inline int decode_all(const Envelope& e) {
  int ok = 0;
  std::string err;
  if (auto r = decode_register(e, err)) {
    ++ok;
    (void)r->config.validate();
  } else {
    EXPECT_FALSE(err.empty());
  }
  err.clear();
  ok += decode_peer_only(e, false, err).has_value();
  err.clear();
  ok += decode_peer_only(e, true, err).has_value();
  err.clear();
  if (auto r = decode_node_register_reply(e, err)) {
    ++ok;
    EXPECT_LE(static_cast<int>(r->status.code()), static_cast<int>(last_errc));
    if (r->status.is_ok()) {
      EXPECT_LT(r->topology.node_id, r->topology.num_nodes);
    }
    (void)r->status.to_string();
  } else {
    EXPECT_FALSE(err.empty());
  }
  return ok;
}

} // namespace chorus::testing
