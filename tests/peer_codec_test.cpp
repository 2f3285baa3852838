// The control-message codecs (peer <-> local server, and the orchestrator's reply): every message
// type survives a round trip, and garbled envelopes (empty, truncated, random words, bit flips,
// out-of-range enum values, wrong message types) decode to an error string, never to a crash or to
// an out-of-range C++ enum.
#include <gtest/gtest.h>

#include <capnp/message.h>
#include <capnp/schema.h>

#include <random>
#include <string>

#include <chorus/config.hpp>
#include "chorus.capnp.h"
#include "messages/envelope.hpp"
#include "messages/node_codec.hpp"
#include "messages/peer_codec.hpp"

namespace chorus {
namespace {

// How many values each wire enum has, read from the schema, so these tests follow the protocol when
// an enum grows (the first out-of-range raw value is exactly this count).
template <class E>
uint16_t enum_count() {
  return static_cast<uint16_t>(capnp::Schema::from<E>().getEnumerants().size());
}

Config rich_config() {
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
  return c;
}

void expect_same_config(const Config& a, const Config& b) {
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
}

GroupRequestData sample_group() {
  GroupRequestData g;
  g.peer = 3;
  g.epoch = 0x123456789abcULL;
  g.members = {5, 3, 0, 4096, UINT32_MAX};
  return g;
}

NodeRegisterReplyData sample_reply() {
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
int decode_all(const Envelope& e) {
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
  if (auto g = decode_group(e, err)) {
    ++ok;
    (void)g->members.size();
  } else {
    EXPECT_FALSE(err.empty());
  }
  err.clear();
  if (auto r = decode_node_register_reply(e, err)) {
    ++ok;
    EXPECT_LE(static_cast<int>(r->status.code()), static_cast<int>(last_errc));
    if (r->status.is_ok()) EXPECT_LT(r->topology.node_id, r->topology.num_nodes);
    (void)r->status.to_string();
  } else {
    EXPECT_FALSE(err.empty());
  }
  return ok;
}

// ---------------------------------------------------------------- round trips

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

TEST(WireCodecRoundTrip, GroupRequest) {
  for (bool destroy : {false, true}) {
    GroupRequestData g = sample_group();
    g.destroy = destroy;
    g.group = destroy ? 77 : 0;
    std::string err;
    auto d = decode_group(encode_group(g), err);
    ASSERT_TRUE(d) << err;
    EXPECT_EQ(d->peer, g.peer);
    EXPECT_EQ(d->epoch, g.epoch);
    EXPECT_EQ(d->members, g.members);
    EXPECT_EQ(d->destroy, g.destroy);
    EXPECT_EQ(d->group, g.group);
  }
}

TEST(WireCodecRoundTrip, NodeRegisterReplyEveryErrorCode) {
  for (int c = 0; c <= static_cast<int>(last_errc); ++c) {
    const Status s(static_cast<Errc>(c), c == 0 ? "" : "node " + std::to_string(c) + " did \xc3\xa9 something");
    std::string err;
    auto d = decode_node_register_reply(encode_node_register_reply(s, sample_reply().topology), err);
    ASSERT_TRUE(d) << err;
    EXPECT_EQ(d->status, s) << d->status.to_string();
    if (c == 0) EXPECT_EQ(d->topology, sample_reply().topology);
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
  EXPECT_EQ(encode_group(sample_group()), encode_group(sample_group()));
  EXPECT_EQ(encode_register({1, 2, rich_config()}), encode_register({1, 2, rich_config()}));
  EXPECT_NE(encode_peer_only(1, false), encode_peer_only(2, false));
}

// ---------------------------------------------------------------- garbled envelopes

TEST(WireCodecGarbled, EmptyEnvelopeIsAnErrorForEveryType) {
  Envelope e;
  std::string err;
  EXPECT_FALSE(decode_register(e, err));
  EXPECT_NE(err.find("garbled message"), std::string::npos) << err;
  EXPECT_NE(err.find("empty"), std::string::npos) << err;
  err.clear();
  EXPECT_FALSE(decode_peer_only(e, false, err));
  EXPECT_FALSE(err.empty());
  err.clear();
  EXPECT_FALSE(decode_peer_only(e, true, err));
  EXPECT_FALSE(err.empty());
  err.clear();
  EXPECT_FALSE(decode_group(e, err));
  EXPECT_FALSE(err.empty());
  err.clear();
  EXPECT_FALSE(decode_node_register_reply(e, err));
  EXPECT_FALSE(err.empty());
}

TEST(WireCodecGarbled, EveryTruncationIsAnError) {
  const std::vector<Envelope> valid = {
      encode_register({protocol_version(), 1, rich_config()}),
      encode_peer_only(3, false),
      encode_group(sample_group()),
      encode_node_register_reply(Status::ok(), sample_reply().topology),
  };
  for (std::size_t m = 0; m < valid.size(); ++m) {
    const Envelope& full = valid[m];
    ASSERT_GE(full.words.size(), 2u);
    for (std::size_t len = 0; len < full.words.size(); ++len) {
      Envelope cut;
      cut.words.assign(full.words.begin(), full.words.begin() + static_cast<std::ptrdiff_t>(len));
      std::string err;
      bool decoded = false;
      switch (m) {
        case 0: decoded = decode_register(cut, err).has_value(); break;
        case 1: decoded = decode_peer_only(cut, false, err).has_value(); break;
        case 2: decoded = decode_group(cut, err).has_value(); break;
        case 3: decoded = decode_node_register_reply(cut, err).has_value(); break;
      }
      EXPECT_FALSE(decoded) << "message " << m << " truncated to " << len << " words decoded";
      EXPECT_NE(err.find("garbled message"), std::string::npos) << err;
      EXPECT_EQ(decode_all(cut), 0) << "message " << m << " truncated to " << len;
    }
  }
}

TEST(WireCodecGarbled, SegmentTableLies) {
  // One segment claiming far more words than the envelope holds.
  Envelope e;
  e.words = {0xFFFFFFF000000000ULL, 0, 0};
  EXPECT_EQ(decode_all(e), 0);
  // A huge segment count.
  e.words = {0x00000000FFFFFFFFULL, 0, 0, 0};
  EXPECT_EQ(decode_all(e), 0);
  // Every bit set.
  e.words.assign(16, ~0ULL);
  EXPECT_EQ(decode_all(e), 0);
}

TEST(WireCodecGarbled, RandomWordsNeverCrash) {
  std::mt19937_64 rng(12345);
  for (int i = 0; i < 3000; ++i) {
    Envelope e;
    e.words.resize(1 + rng() % 40);
    for (auto& w : e.words) w = rng();
    decode_all(e);
  }
}

TEST(WireCodecGarbled, RandomBodiesBehindAValidSegmentTableNeverCrash) {
  // With a plausible segment table the reader actually walks the random pointers.
  std::mt19937_64 rng(777);
  int decoded = 0;
  for (int i = 0; i < 3000; ++i) {
    const uint64_t size = 1 + rng() % 40;
    Envelope e;
    e.words.push_back(size << 32);  // segment count - 1 = 0, segment 0 has `size` words
    for (uint64_t k = 0; k < size; ++k) {
      uint64_t w = rng();
      if (rng() % 3 == 0) w &= 0x0000FFFF0000FFFFULL;  // small offsets and sizes: in-bounds pointers
      e.words.push_back(w);
    }
    decoded += decode_all(e);
  }
  SUCCEED() << decoded << " random messages decoded to in-range values";
}

TEST(WireCodecGarbled, BitFlipsOfValidMessagesNeverCrash) {
  const std::vector<Envelope> valid = {
      encode_register({protocol_version(), 1, rich_config()}),
      encode_group(sample_group()),
      encode_node_register_reply(Status(Errc::shape_mismatch, "peer 0 has f32[4] but peer 1 has f32[5]")),
  };
  std::mt19937_64 rng(99);
  for (const Envelope& v : valid) {
    for (std::size_t w = 0; w < v.words.size(); ++w)
      for (int bit = 0; bit < 64; ++bit) {
        Envelope e = v;
        e.words[w] ^= 1ULL << bit;
        decode_all(e);
      }
    for (int i = 0; i < 200; ++i) {  // several random byte rewrites at once
      Envelope e = v;
      for (int k = 0; k < 4; ++k) {
        auto* bytes = reinterpret_cast<unsigned char*>(e.words.data());
        bytes[rng() % (e.words.size() * 8)] = static_cast<unsigned char>(rng());
      }
      decode_all(e);
    }
  }
}

Envelope raw_register(uint16_t algorithm, unsigned local_entries, unsigned global_entries) {
  capnp::MallocMessageBuilder mb;
  auto b = mb.initRoot<wire::RegisterRequest>();
  b.setProtocolVersion(protocol_version());
  b.setPeerId(0);
  auto c = b.initConfig();
  c.setNumDevices(2);
  auto loc = c.initLocalStrategies(local_entries);
  for (unsigned k = 0; k < local_entries; ++k) {
    loc[k].setIsAuto(false);
    loc[k].setAlgorithm(static_cast<wire::Algorithm>(k == 0 ? algorithm : 1));
    loc[k].setArity(2);
  }
  auto glob = c.initGlobalStrategies(global_entries);
  for (unsigned k = 0; k < global_entries; ++k) glob[k].setIsAuto(true);
  c.setAutoTreeArity(2);
  c.setTimeoutMs(1000);
  return seal(mb);
}

TEST(WireCodecGarbled, RegisterStrategyLists) {
  const unsigned n = static_cast<unsigned>(num_collective_kinds);
  const uint16_t algorithms = enum_count<wire::Algorithm>();
  std::string err;
  for (uint16_t a = 0; a < algorithms; ++a) {  // every algorithm the protocol knows decodes
    auto ok = decode_register(raw_register(a, n, n), err);
    ASSERT_TRUE(ok) << err;
    EXPECT_EQ(ok->config.local[0].fixed.algorithm, static_cast<Algorithm>(a));
    EXPECT_NE(to_string(ok->config.local[0].fixed), "") << "algorithm " << a;
  }

  err.clear();
  EXPECT_FALSE(decode_register(raw_register(algorithms, n, n), err));
  EXPECT_NE(err.find("unknown algorithm " + std::to_string(algorithms)), std::string::npos) << err;

  err.clear();
  EXPECT_FALSE(decode_register(raw_register(0, 3, n), err));
  EXPECT_NE(err.find("strategy list has 3 entries"), std::string::npos) << err;

  err.clear();
  EXPECT_FALSE(decode_register(raw_register(0, n, n + 1), err));
  EXPECT_NE(err.find("strategy list has " + std::to_string(n + 1) + " entries"), std::string::npos) << err;
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

TEST(WireCodecGarbled, ReplyWithUnknownErrorCode) {
  capnp::MallocMessageBuilder mb;
  auto b = mb.initRoot<wire::NodeRegisterReply>();
  b.setCode(static_cast<uint16_t>(last_errc) + 1);
  b.setMessage("from the future");
  std::string err;
  EXPECT_FALSE(decode_node_register_reply(seal(mb), err));
  EXPECT_NE(err.find("unknown error code"), std::string::npos) << err;
}

TEST(WireCodecGarbled, WrongMessageTypeNeverCrashes) {
  const std::vector<Envelope> all = {
      encode_register({protocol_version(), 1, rich_config()}),
      encode_peer_only(3, false),
      encode_peer_only(4, true),
      encode_group(sample_group()),
      encode_node_register_reply(Status(Errc::timeout, "peer 2 never called")),
  };
  for (const Envelope& e : all) decode_all(e);
  // A Finish read as a RegisterRequest has no config, hence no strategy lists: an error.
  std::string err;
  EXPECT_FALSE(decode_register(encode_peer_only(3, false), err));
  EXPECT_NE(err.find("strategy list has 0 entries"), std::string::npos) << err;
}

} // namespace
} // namespace chorus
