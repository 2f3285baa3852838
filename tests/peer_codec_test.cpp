// The control-message codecs (peer <-> local server, and the orchestrator's reply): every message
// type survives a round trip, with every field set, every error code, every algorithm and arity,
// and encodes deterministically.
#include <gtest/gtest.h>

#include <string>

#include "codec_samples.hpp"

namespace chorus {
namespace {

using namespace testing;

TEST(WireCodecRoundTrip, RegisterWithDefaultConfig) {
  RegisterData r;
  r.protocol_version = protocol_version();
  r.peer = 0;
  std::string err;
  auto d = decode_register(encode_register(r), err);
  ASSERT_TRUE(d) << err;
  EXPECT_EQ(d->protocol_version, protocol_version());
  EXPECT_EQ(d->peer, 0u);
  expect_same_config(d->config, Config{});
}

TEST(WireCodecRoundTrip, RegisterWithEveryFieldSet) {
  RegisterData r{77, 4000000000u, rich_config()};
  std::string err;
  auto d = decode_register(encode_register(r), err);
  ASSERT_TRUE(d) << err;
  EXPECT_EQ(d->protocol_version, 77u);
  EXPECT_EQ(d->peer, 4000000000u);
  expect_same_config(d->config, r.config);
}

TEST(WireCodecRoundTrip, RegisterWithInvalidConfigStillRoundTrips) {
  // The codec carries values; validation is the server's job. Nothing may be clamped on the way.
  Config c;
  c.num_devices = 0;
  c.auto_tree_arity = 1;
  c.timeout = std::chrono::milliseconds(1);
  c.num_nodes = 2;  // partial multi-node fields
  RegisterData r{protocol_version(), 5, c};
  std::string err;
  auto d = decode_register(encode_register(r), err);
  ASSERT_TRUE(d) << err;
  expect_same_config(d->config, c);
  EXPECT_EQ(d->config.validate().code(), Errc::invalid_config);
}

TEST(WireCodecRoundTrip, FinishAndReset) {
  for (uint32_t peer : {0u, 1u, 4095u, UINT32_MAX}) {
    for (bool reset : {false, true}) {
      std::string err;
      auto d = decode_peer_only(encode_peer_only(peer, reset), reset, err);
      ASSERT_TRUE(d) << err;
      EXPECT_EQ(*d, peer);
    }
  }
}

TEST(WireCodecRoundTrip, NodeRegisterReplyEveryErrorCode) {
  for (int c = 0; c <= static_cast<int>(last_errc); ++c) {
    const Status s(static_cast<Errc>(c), c == 0 ? "" : "node " + std::to_string(c) + " did \xc3\xa9 something");
    std::string err;
    auto d = decode_node_register_reply(encode_node_register_reply(s, sample_reply().topology), err);
    ASSERT_TRUE(d) << err;
    EXPECT_EQ(d->status, s) << d->status.to_string();
    if (c == 0) {
      EXPECT_EQ(d->topology, sample_reply().topology);
    }
    EXPECT_NE(to_string(static_cast<Errc>(c)), "unknown");
  }
  // A long message survives intact.
  const Status big(Errc::timeout, std::string(100000, 'x'));
  std::string err;
  auto d = decode_node_register_reply(encode_node_register_reply(big), err);
  ASSERT_TRUE(d) << err;
  EXPECT_EQ(d->status, big);
}

TEST(WireCodecRoundTrip, EncodingIsDeterministic) {
  EXPECT_EQ(encode_node_register_reply(Status::ok(), sample_reply().topology),
            encode_node_register_reply(Status::ok(), sample_reply().topology));
  EXPECT_EQ(encode_register({1, 2, rich_config()}), encode_register({1, 2, rich_config()}));
  EXPECT_NE(encode_peer_only(1, false), encode_peer_only(2, false));
}

TEST(WireCodecRoundTrip, EveryAlgorithmAndArity) {
  const uint16_t algorithms = enum_count<wire::Algorithm>();
  for (uint16_t a = 0; a < algorithms; ++a)
    for (int arity : {2, 3, 8}) {
      Config c;
      c.num_devices = 4;
      c.local.fill(StrategyChoice{false, {static_cast<Algorithm>(a), arity}});
      c.global[1] = StrategyChoice{false, {static_cast<Algorithm>(a), arity}};
      std::string err;
      auto d = decode_register(encode_register({protocol_version(), 2, c}), err);
      ASSERT_TRUE(d) << err;
      expect_same_config(d->config, c);
    }
}

} // namespace
} // namespace chorus
