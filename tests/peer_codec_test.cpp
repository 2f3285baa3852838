// The wire codec: every message type survives a round trip, and garbled envelopes (empty,
// truncated, random words, bit flips, out-of-range enum values, wrong message types) decode to an
// error string, never to a crash or to an out-of-range C++ enum.
#include <gtest/gtest.h>

#include <capnp/message.h>
#include <capnp/schema.h>

#include <random>
#include <string>

#include <chorus/config.hpp>
#include "chorus.capnp.h"
#include "messages/envelope.hpp"
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

void expect_same_meta(const TensorMeta& a, const TensorMeta& b) {
  EXPECT_EQ(a.present, b.present);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.shape, b.shape);
}

void expect_same_op(const OpRequestData& a, const OpRequestData& b) {
  EXPECT_EQ(a.peer, b.peer);
  EXPECT_EQ(a.seq, b.seq);
  EXPECT_EQ(a.group, b.group);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.redop, b.redop);
  EXPECT_EQ(a.root, b.root);
  expect_same_meta(a.input, b.input);
  expect_same_meta(a.output, b.output);
  EXPECT_EQ(a.other, b.other);
  EXPECT_EQ(a.tag, b.tag);
  EXPECT_EQ(a.root_from_data, b.root_from_data);
}

OpRequestData sample_op() {
  OpRequestData r;
  r.peer = 3;
  r.seq = 0x123456789abcULL;
  r.group = 0;
  r.kind = OpKind::reduce_scatter;
  r.redop = ReduceOp::max;
  r.root = 2;
  r.input = {true, DType::f64, {4, 3, 2}};
  r.output = {true, DType::f64, {6}};
  r.other = 1;
  r.tag = 99;
  r.root_from_data = false;
  return r;
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
  if (auto r = decode_op(e, err)) {
    ++ok;
    // A successful decode only ever yields in-range enums.
    EXPECT_LE(static_cast<int>(r->kind), static_cast<int>(OpKind::recv));
    EXPECT_LE(static_cast<int>(r->redop), static_cast<int>(ReduceOp::bxor));
    EXPECT_LE(static_cast<int>(r->input.dtype), static_cast<int>(DType::i64));
    EXPECT_LE(static_cast<int>(r->output.dtype), static_cast<int>(DType::i64));
    for (auto d : r->input.shape) EXPECT_GE(d, 0);
    for (auto d : r->output.shape) EXPECT_GE(d, 0);
    (void)r->input.describe();
  } else {
    EXPECT_FALSE(err.empty());
  }
  err.clear();
  if (auto s = decode_reply(e, err)) {
    ++ok;
    EXPECT_LE(static_cast<int>(s->code()), static_cast<int>(last_errc));
    (void)s->to_string();
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

TEST(WireCodecRoundTrip, OpRequestEveryKindRedopAndDtype) {
  int checked = 0;
  for (int k = 0; k <= static_cast<int>(OpKind::recv); ++k)
    for (ReduceOp op : all_reduce_ops)
      for (DType t : all_dtypes) {
        OpRequestData r = sample_op();
        r.kind = static_cast<OpKind>(k);
        r.redop = op;
        r.input.dtype = t;
        r.output.dtype = all_dtypes[(static_cast<int>(t) + 3) % 8];
        r.root_from_data = (k + static_cast<int>(op)) % 2 == 0;
        r.seq = static_cast<uint64_t>(checked) * 1000003ULL;
        std::string err;
        auto d = decode_op(encode_op(r), err);
        ASSERT_TRUE(d) << err;
        expect_same_op(*d, r);
        ++checked;
      }
  EXPECT_EQ(checked, 11 * 8 * 8);
}

TEST(WireCodecRoundTrip, OpRequestTensorVariants) {
  const std::vector<std::pair<TensorMeta, TensorMeta>> cases = {
      {{false, DType::f32, {}}, {false, DType::f32, {}}},         // barrier: no buffers
      {{true, DType::i8, {}}, {false, DType::f32, {}}},           // a scalar (rank 0)
      {{true, DType::u8, {0}}, {true, DType::u8, {0}}},           // empty tensors
      {{true, DType::bf16, {1, 1, 1, 1, 1, 1, 1, 1}}, {true, DType::f16, {8}}},
      {{true, DType::i64, {INT64_MAX}}, {true, DType::i32, {1LL << 40, 3}}},
  };
  for (const auto& [in, out] : cases) {
    OpRequestData r = sample_op();
    r.input = in;
    r.output = out;
    std::string err;
    auto d = decode_op(encode_op(r), err);
    ASSERT_TRUE(d) << err;
    expect_same_op(*d, r);
  }
}

TEST(WireCodecRoundTrip, OpRequestExtremeScalars) {
  OpRequestData r = sample_op();
  r.peer = UINT32_MAX;
  r.seq = UINT64_MAX;
  r.group = UINT32_MAX;
  r.root = UINT32_MAX;
  r.other = UINT32_MAX;
  r.tag = UINT64_MAX;
  r.root_from_data = true;
  std::string err;
  auto d = decode_op(encode_op(r), err);
  ASSERT_TRUE(d) << err;
  expect_same_op(*d, r);
}

TEST(WireCodecRoundTrip, ReplyEveryErrorCode) {
  for (int c = 0; c <= static_cast<int>(Errc::internal); ++c) {
    const Status s(static_cast<Errc>(c), c == 0 ? "" : "peer " + std::to_string(c) + " did \xc3\xa9 something");
    std::string err;
    auto d = decode_reply(encode_reply(static_cast<uint64_t>(c) * 7, s), err);
    ASSERT_TRUE(d) << err;
    EXPECT_EQ(*d, s) << d->to_string();
    EXPECT_NE(to_string(static_cast<Errc>(c)), "unknown");
  }
  // A long message survives intact.
  const Status big(Errc::timeout, std::string(100000, 'x'));
  std::string err;
  auto d = decode_reply(encode_reply(1, big), err);
  ASSERT_TRUE(d) << err;
  EXPECT_EQ(*d, big);
}

TEST(WireCodecRoundTrip, EncodingIsDeterministic) {
  EXPECT_EQ(encode_op(sample_op()), encode_op(sample_op()));
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
  EXPECT_FALSE(decode_op(e, err));
  EXPECT_FALSE(err.empty());
  err.clear();
  EXPECT_FALSE(decode_reply(e, err));
  EXPECT_FALSE(err.empty());
}

TEST(WireCodecGarbled, EveryTruncationIsAnError) {
  const std::vector<Envelope> valid = {
      encode_register({protocol_version(), 1, rich_config()}),
      encode_peer_only(3, false),
      encode_op(sample_op()),
      encode_reply(5, Status(Errc::timeout, "peers 2, 3 never called")),
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
        case 2: decoded = decode_op(cut, err).has_value(); break;
        case 3: decoded = decode_reply(cut, err).has_value(); break;
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
      encode_op(sample_op()),
      encode_reply(5, Status(Errc::shape_mismatch, "peer 0 has f32[4] but peer 1 has f32[5]")),
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

// Builds an OpRequest with raw, possibly out-of-range enum values.
Envelope raw_op(uint16_t kind, uint16_t redop, uint16_t in_dtype, uint16_t out_dtype,
                std::vector<int64_t> in_shape = {4}) {
  capnp::MallocMessageBuilder mb;
  auto b = mb.initRoot<wire::OpRequest>();
  b.setPeerId(1);
  b.setSeq(2);
  b.setKind(static_cast<wire::OpKind>(kind));
  b.setRedop(static_cast<wire::ReduceOp>(redop));
  auto in = b.initInput();
  in.setPresent(true);
  in.setDtype(static_cast<wire::DType>(in_dtype));
  auto s = in.initShape(static_cast<unsigned>(in_shape.size()));
  for (std::size_t i = 0; i < in_shape.size(); ++i) s.set(i, in_shape[i]);
  auto out = b.initOutput();
  out.setPresent(true);
  out.setDtype(static_cast<wire::DType>(out_dtype));
  out.initShape(1).set(0, 4);
  return seal(mb);
}

TEST(WireCodecGarbled, OutOfRangeEnumsInOpRequest) {
  const uint16_t kinds = enum_count<wire::OpKind>(), redops = enum_count<wire::ReduceOp>(),
                 dtypes = enum_count<wire::DType>();
  EXPECT_EQ(kinds, static_cast<uint16_t>(OpKind::recv) + 1) << "wire and C++ op kinds differ";
  EXPECT_EQ(redops, static_cast<uint16_t>(ReduceOp::bxor) + 1) << "wire and C++ reduce ops differ";
  EXPECT_EQ(dtypes, static_cast<uint16_t>(DType::i64) + 1) << "wire and C++ dtypes differ";
  std::string err;
  ASSERT_TRUE(decode_op(raw_op(kinds - 1, redops - 1, dtypes - 1, dtypes - 1), err)) << err;  // largest valid

  err.clear();
  EXPECT_FALSE(decode_op(raw_op(kinds, 0, 2, 2), err));
  EXPECT_NE(err.find("unknown op kind " + std::to_string(kinds)), std::string::npos) << err;

  err.clear();
  EXPECT_FALSE(decode_op(raw_op(65535, 0, 2, 2), err));
  EXPECT_NE(err.find("unknown op kind 65535"), std::string::npos) << err;

  err.clear();
  EXPECT_FALSE(decode_op(raw_op(0, redops, 2, 2), err));
  EXPECT_NE(err.find("unknown reduce op " + std::to_string(redops)), std::string::npos) << err;

  err.clear();
  EXPECT_FALSE(decode_op(raw_op(0, 0, dtypes, 2), err));
  EXPECT_NE(err.find("unknown dtype " + std::to_string(dtypes)), std::string::npos) << err;

  err.clear();
  EXPECT_FALSE(decode_op(raw_op(0, 0, 2, 300), err));
  EXPECT_NE(err.find("unknown dtype 300"), std::string::npos) << err;
}

TEST(WireCodecGarbled, NegativeDimension) {
  std::string err;
  EXPECT_FALSE(decode_op(raw_op(0, 0, 2, 2, {4, -3}), err));
  EXPECT_NE(err.find("negative dimension -3"), std::string::npos) << err;
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
  auto b = mb.initRoot<wire::OpReply>();
  b.setSeq(1);
  b.setCode(static_cast<uint16_t>(last_errc) + 1);
  b.setMessage("from the future");
  std::string err;
  EXPECT_FALSE(decode_reply(seal(mb), err));
  EXPECT_NE(err.find("unknown error code"), std::string::npos) << err;
}

TEST(WireCodecGarbled, WrongMessageTypeNeverCrashes) {
  const std::vector<Envelope> all = {
      encode_register({protocol_version(), 1, rich_config()}),
      encode_peer_only(3, false),
      encode_peer_only(4, true),
      encode_op(sample_op()),
      encode_reply(5, Status(Errc::timeout, "peer 2 never called")),
  };
  for (const Envelope& e : all) decode_all(e);
  // A Finish read as a RegisterRequest has no config, hence no strategy lists: an error.
  std::string err;
  EXPECT_FALSE(decode_register(encode_peer_only(3, false), err));
  EXPECT_NE(err.find("strategy list has 0 entries"), std::string::npos) << err;
}

} // namespace
} // namespace chorus
