// Garbled control-message envelopes (empty, truncated, lying segment tables, random words, bit
// flips, out-of-range enum values, wrong message types) decode to an error string, never to a
// crash or to an out-of-range C++ enum.
#include <gtest/gtest.h>

#include <capnp/message.h>
#include <random>
#include <string>

#include "codec_samples.hpp"

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

} // namespace
} // namespace chorus
