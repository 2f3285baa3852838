// Garbled control-message envelopes (empty, truncated, lying segment tables, random words, bit
// flips, out-of-range enum values, wrong message types, lists that claim millions of empty
// elements) decode to an error string, never to a crash, an out-of-range C++ enum or a huge
// allocation.
#include <gtest/gtest.h>

#include <capnp/message.h>
#include <random>
#include <string>

#include "codec_samples.hpp"
#include "messages/status_codec.hpp"

namespace chorus {
namespace {

using namespace testing;

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
  EXPECT_FALSE(decode_node_register_reply(e, err));
  EXPECT_FALSE(err.empty());
}

TEST(WireCodecGarbled, EveryTruncationIsAnError) {
  const std::vector<Envelope> valid = {
      encode_register({protocol_version(), 1, rich_config()}),
      encode_peer_only(3, false),
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
        case 2: decoded = decode_node_register_reply(cut, err).has_value(); break;
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
      encode_node_register_reply(Status::ok(), sample_reply().topology),
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
      encode_node_register_reply(Status::ok(), sample_reply().topology),
      encode_node_register_reply(Status(Errc::timeout, "peer 2 never called")),
  };
  for (const Envelope& e : all) decode_all(e);
  // A Finish read as a RegisterRequest has no config, hence no strategy lists: an error.
  std::string err;
  EXPECT_FALSE(decode_register(encode_peer_only(3, false), err));
  EXPECT_NE(err.find("strategy list has 0 entries"), std::string::npos) << err;
}

// A message whose root struct (no data, two pointers) has as its second pointer a list of `count`
// elements of no size (Cap'n Proto lets a list of empty structs claim any length without bytes),
// or, with `nested`, a struct (no data, one pointer) that holds such a list.
Envelope empty_elements(uint64_t count, bool nested) {
  const uint64_t list = 1 | (count << 35);  // a list pointer, element size 0 (void)
  const uint64_t root = uint64_t{2} << 48;  // a struct pointer: 0 data words, 2 pointers
  const uint64_t inner = uint64_t{1} << 48;  // 0 data words, 1 pointer
  Envelope e;
  e.words = nested ? std::vector<uint64_t>{uint64_t{4} << 32, root, 0, inner, list}
                   : std::vector<uint64_t>{uint64_t{3} << 32, root, 0, list};
  return e;
}

// Found by tests/fuzz/ (status_codec_fuzz, node_codec_fuzz, envelope_fuzz): a 32-byte node status
// claiming 60 million peers made decode_node_status allocate 2.5 GiB (and a 40-byte register reply
// 3 GiB of topology entries); the reader's traversal budget allowed 64 Mi words whatever the
// envelope's size. Now the budget is in proportion to the envelope.
TEST(WireCodecGarbled, ListsOfEmptyElementsCannotAmplifyADecode) {
  constexpr uint64_t kMillions = 60'000'000;
  std::string err;
  EXPECT_FALSE(decode_node_status(empty_elements(kMillions, false), err));  // NodeStatus.peers
  EXPECT_NE(err.find("traversal limit"), std::string::npos) << err;
  err.clear();
  EXPECT_FALSE(decode_job_status(empty_elements(kMillions, false), err));  // JobStatus.nodes
  EXPECT_NE(err.find("traversal limit"), std::string::npos) << err;
  err.clear();
  EXPECT_FALSE(decode_node_register_reply(empty_elements(kMillions, true), err));  // .topology.nodes
  EXPECT_NE(err.find("traversal limit"), std::string::npos) << err;
  // Within the budget (a few words per word of the envelope) such a list still decodes, as
  // default elements, and what follows from it is checked as before.
  err.clear();
  auto few = decode_node_status(empty_elements(16, false), err);
  ASSERT_TRUE(few) << err;
  EXPECT_EQ(few->peers.size(), 16u);
  EXPECT_EQ(few->peers[15].rank, 0u);
  EXPECT_EQ(few->peers[15].seq, 0u);
  EXPECT_TRUE(few->peers[15].op.empty());
  err.clear();
  EXPECT_FALSE(decode_node_register_reply(empty_elements(16, true), err));
  EXPECT_NE(err.find("inconsistent topology"), std::string::npos) << err;
}

// The budget leaves room for every real message, however large: a job status of 64 nodes of 64
// peers each with long texts, and a register reply of 4096 nodes.
TEST(WireCodecGarbled, LargeRealMessagesStillDecode) {
  JobStatusData j;
  j.collective = 5;
  for (uint32_t n = 0; n < 64; ++n) {
    NodeStatusData ns;
    ns.node = n;
    ns.host = std::string(200, 'h');
    for (uint32_t p = 0; p < 64; ++p)
      ns.peers.push_back({n * 64 + p, true, 1, p, std::string(100, 'o'), "running", 7, std::string(100, 'w'), ""});
    j.nodes.push_back(ns);
    j.silent.push_back(n);
  }
  std::string err;
  auto back = decode_job_status(encode_job_status(j), err);
  ASSERT_TRUE(back) << err;
  EXPECT_EQ(back->nodes, j.nodes);
  EXPECT_EQ(back->silent, j.silent);

  TopologyData t;
  t.num_nodes = 4096;
  for (uint32_t n = 0; n < t.num_nodes; ++n) t.nodes.push_back({1, n, "10.0.0." + std::to_string(n % 250) + ":7000", 8, 0});
  t.total_peers = t.num_nodes;
  auto reply = decode_node_register_reply(encode_node_register_reply(Status::ok(), t), err);
  ASSERT_TRUE(reply) << err;
  EXPECT_EQ(reply->topology, t);
  NodeRegisterData r{protocol_version(), std::string(1000, 's'), rich_config(), 7, std::string(1000, 'a'), 8,
                     std::string(1000, 'k')};
  r.config.orchestrator_address = std::string(1000, 'o');
  auto reg = decode_node_register(encode_node_register(r), err);
  ASSERT_TRUE(reg) << err;
  expect_same_config(reg->config, r.config);
  EXPECT_EQ(reg->host_key, r.host_key);
}

} // namespace
} // namespace chorus
