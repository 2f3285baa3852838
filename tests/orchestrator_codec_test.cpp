// The orchestrator's message codecs (messages/node_codec.hpp): register, reply, leave and loss
// round trips, and garbled input that is an error, not a crash.
#include <gtest/gtest.h>

#include <string>

#include "messages/node_codec.hpp"
#include "messages/peer_codec.hpp"
#include "orchestrator_fixtures.hpp"
#include "status_matchers.hpp"

namespace chorus {
namespace {

using namespace chorus::testing;

TEST(OrchestratorCodec, RegisterRoundTrips) {
  auto r = reg(3, 2, "10.0.0.1:5000");
  r.config.auto_tree_arity = 5;
  r.config.global[2] = StrategyChoice{};
  r.config.host_transport = HostTransport::network;
  r.host_key = "boot:1b2c net:net:[4026531840] name:n1";
  std::string error;
  auto d = decode_node_register(encode_node_register(r), error);
  ASSERT_TRUE(d) << error;
  EXPECT_EQ(d->protocol_version, r.protocol_version);
  EXPECT_EQ(d->secret, "s3");
  EXPECT_EQ(d->num_peers, 2u);
  EXPECT_EQ(d->data_address, "10.0.0.1:5000");
  EXPECT_EQ(d->host_key, r.host_key);
  EXPECT_EQ(d->config.first_difference(r.config), "");
  EXPECT_EQ(d->config.host_transport, HostTransport::network);
  // Nodes that disagree on it are told which field.
  Config other = r.config;
  other.host_transport = HostTransport::automatic;
  EXPECT_EQ(other.first_difference(r.config), "host_transport (automatic vs network)");
}

TEST(OrchestratorCodec, ReplyLeaveLostRoundTrip) {
  TopologyData t{7, 1, 2, 5, {{2, 0, "a:1", 8, 0}, {3, 2, "b:2", 8, 1}}};
  std::string error;
  auto ok = decode_node_register_reply(encode_node_register_reply(Status::ok(), t), error);
  ASSERT_TRUE(ok) << error;
  EXPECT_TRUE(ok->status.is_ok());
  EXPECT_EQ(ok->topology, t);
  auto bad = decode_node_register_reply(encode_node_register_reply({Errc::config_mismatch, "x (1 vs 2)"}), error);
  ASSERT_TRUE(bad);
  EXPECT_TRUE(has(bad->status, Errc::config_mismatch, {"x (1 vs 2)"}));
  auto l = decode_node_leave(encode_node_leave({4, 2}), error);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->collective, 4u);
  EXPECT_EQ(l->node_id, 2u);
  auto lost = decode_node_lost(encode_node_lost({4, 1, "gone"}), error);
  ASSERT_TRUE(lost);
  EXPECT_EQ(lost->node_id, 1u);
  EXPECT_EQ(lost->reason, "gone");
}

TEST(OrchestratorCodec, GarbledInputIsAnErrorNotACrash) {
  std::string error;
  EXPECT_FALSE(decode_node_register(Envelope{{0xffffffffffffffffull, 1, 2}}, error));
  EXPECT_NE(error.find("garbled"), std::string::npos) << error;
  error.clear();
  EXPECT_FALSE(decode_node_register(Envelope{}, error));
  EXPECT_FALSE(error.empty());
  // A topology whose node list disagrees with its node count.
  TopologyData t{1, 5, 2, 1, {{1, 0, "a:1"}}};
  EXPECT_FALSE(decode_node_register_reply(encode_node_register_reply(Status::ok(), t), error));
}

} // namespace
} // namespace chorus
