// The orchestrator's message codecs (messages/node_codec.hpp, link_codec.hpp): register, reply,
// leave, loss and broken-link round trips, and garbled input that is an error, not a crash.
#include <gtest/gtest.h>

#include <string>

#include <capnp/message.h>

#include "chorus.capnp.h"
#include "messages/link_codec.hpp"
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
  r.gpus = 4;
  std::string error;
  auto d = decode_node_register(encode_node_register(r), error);
  ASSERT_TRUE(d) << error;
  EXPECT_EQ(d->protocol_version, r.protocol_version);
  EXPECT_EQ(d->secret, "") << "the secret crossed the wire";
  const Envelope e = encode_node_register(r);
  const std::string bytes(reinterpret_cast<const char*>(e.words.data()), e.words.size() * sizeof(e.words[0]));
  EXPECT_EQ(bytes.find("s3"), std::string::npos) << "the secret is in the registration's bytes";
  EXPECT_EQ(d->num_peers, 2u);
  EXPECT_EQ(d->data_address, "10.0.0.1:5000");
  EXPECT_EQ(d->host_key, r.host_key);
  EXPECT_EQ(d->gpus, 4u);
  EXPECT_EQ(d->config.first_difference(r.config), "");
  EXPECT_EQ(d->config.host_transport, HostTransport::network);
  // Nodes that disagree on it are told which field.
  Config other = r.config;
  other.host_transport = HostTransport::automatic;
  EXPECT_EQ(other.first_difference(r.config), "host_transport (automatic vs network)");
}

// A rejoin's lists (excluded nodes, links it cannot keep) and a topology's previous ids and links
// to remake cross the wire; lists out of order, and a link to remake that names no other node,
// are refused.
TEST(OrchestratorCodec, RejoinAndEpochListsRoundTrip) {
  auto r = reg(3, 2, "10.0.0.1:5000");
  r.rejoin = {RejoinData::Kind::shrink, 9, 1, 0xabcdef, {2}, {0, 2}};
  std::string error;
  auto d = decode_node_register(encode_node_register(r), error);
  ASSERT_TRUE(d) << error;
  EXPECT_EQ(d->rejoin, r.rejoin);
  r.rejoin.unkept = {2, 0};
  EXPECT_FALSE(decode_node_register(encode_node_register(r), error));
  EXPECT_NE(error.find("rejoin unkept list not ascending"), std::string::npos) << error;
  TopologyData t{10, 1, 3, 3, {{1, 0, "a:1"}, {1, 1, "b:2"}, {1, 2, "c:3"}}, 5, 1, 77, {0, 2, -1}, {0, 2}};
  auto ok = decode_node_register_reply(encode_node_register_reply(Status::ok(), t), error);
  ASSERT_TRUE(ok) << error;
  EXPECT_EQ(ok->topology, t);
  for (std::vector<uint32_t> bad : {std::vector<uint32_t>{1}, {3}, {2, 0}}) {
    t.relink = bad;
    EXPECT_FALSE(decode_node_register_reply(encode_node_register_reply(Status::ok(), t), error));
    EXPECT_NE(error.find("inconsistent topology (links to remake)"), std::string::npos) << error;
  }
}

TEST(OrchestratorCodec, ReplyLeaveLostRoundTrip) {
  TopologyData t{7, 1, 2, 5, {{2, 0, "a:1", 8, 0, 4}, {3, 2, "b:2", 8, 1, 0}}};
  std::string error;
  auto ok = decode_node_register_reply(encode_node_register_reply(Status::ok(), t), error);
  ASSERT_TRUE(ok) << error;
  EXPECT_TRUE(ok->status.is_ok());
  EXPECT_EQ(ok->topology, t);
  EXPECT_EQ(ok->topology.nodes[0].gpus, 4u);  // every node learns every node's GPUs
  EXPECT_EQ(ok->topology.nodes[1].gpus, 0u);
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

TEST(OrchestratorCodec, LinkLostRoundTripsAndNamesBothEndsAlike) {
  const LinkLostData l{9, 2, 0, "the connection failed: Connection reset by peer"};
  std::string error;
  auto d = decode_link_lost(encode_link_lost(l), error);
  ASSERT_TRUE(d) << error;
  EXPECT_EQ(*d, l);
  EXPECT_EQ(link_lost_message(l),
            "the data connection between node 0 and node 2 broke (node 2 saw: the connection failed: Connection reset by peer)");
  // The other end words the same link alike, lower node first.
  EXPECT_EQ(link_lost_message({9, 0, 2, "x"}), "the data connection between node 0 and node 2 broke (node 0 saw: x)");
  // An overlong reason is cut when encoded.
  auto cut = decode_link_lost(encode_link_lost({9, 1, 0, std::string(5000, 'r')}), error);
  ASSERT_TRUE(cut) << error;
  EXPECT_EQ(cut->reason, std::string(kMaxLinkReason, 'r'));
}

// A LinkLost as a hostile or broken sender could build it, bypassing encode_link_lost's cut.
Envelope raw_link_lost(uint32_t reporter, uint32_t other, const std::string& reason) {
  capnp::MallocMessageBuilder mb;
  auto b = mb.initRoot<wire::LinkLost>();
  b.setCollective(1);
  b.setReporter(reporter);
  b.setOther(other);
  b.setReason(reason);
  return seal(mb);
}

TEST(OrchestratorCodec, GarbledLinkLostIsAnErrorNotACrash) {
  std::string error;
  EXPECT_FALSE(decode_link_lost(Envelope{{0xffffffffffffffffull, 1, 2}}, error));
  EXPECT_NE(error.find("garbled"), std::string::npos) << error;
  error.clear();
  EXPECT_FALSE(decode_link_lost(Envelope{}, error));
  EXPECT_FALSE(error.empty());
  error.clear();
  EXPECT_FALSE(decode_link_lost(raw_link_lost(3, 3, "x"), error));
  EXPECT_NE(error.find("a link from node 3 to itself"), std::string::npos) << error;
  error.clear();
  EXPECT_FALSE(decode_link_lost(raw_link_lost(0, 1, std::string(kMaxLinkReason + 1, 'r')), error));
  EXPECT_NE(error.find("a reason of 513 bytes (at most 512)"), std::string::npos) << error;
  EXPECT_TRUE(decode_link_lost(raw_link_lost(0, 1, std::string(kMaxLinkReason, 'r')), error)) << error;
  // Every cut short valid message is refused; every single flipped byte gets an answer, never a crash.
  const Envelope whole = encode_link_lost({5, 1, 2, "reset"});
  for (std::size_t n = 0; n < whole.words.size(); ++n) {
    Envelope part{std::vector<uint64_t>(whole.words.begin(), whole.words.begin() + static_cast<long>(n))};
    EXPECT_FALSE(decode_link_lost(part, error)) << n << " of " << whole.words.size() << " words";
  }
  for (std::size_t byte = 0; byte < whole.words.size() * 8; ++byte) {
    Envelope flipped = whole;
    reinterpret_cast<unsigned char*>(flipped.words.data())[byte] ^= 0xff;
    (void)decode_link_lost(flipped, error);
  }
}

} // namespace
} // namespace chorus
