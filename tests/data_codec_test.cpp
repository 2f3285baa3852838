// The codecs of what nodes send each other on the data connections (messages/data_codec.hpp: the
// data hello, op announcements, the point-to-point header and its answer): every message survives a
// round trip with every value its fields can take, and garbled payloads (empty, a torn word, every
// truncation, segment tables that lie, random bytes, bit flips, out-of-range enums and error codes,
// the wrong message type) decode to an error string, never to a crash or an out-of-range C++ enum.
#include <gtest/gtest.h>

#include <capnp/message.h>

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "chorus.capnp.h"
#include "messages/data_codec.hpp"
#include "messages/envelope.hpp"

namespace chorus {
namespace {

// The first raw value past each C++ enum the wire carries as a plain integer.
constexpr uint8_t kKinds = static_cast<uint8_t>(OpKind::recv) + 1;
constexpr uint8_t kDtypes = static_cast<uint8_t>(DType::i64) + 1;
constexpr uint8_t kRedops = static_cast<uint8_t>(ReduceOp::bxor) + 1;
constexpr uint16_t kCodes = static_cast<uint16_t>(last_errc) + 1;

OpAnnouncement sample_announcement() {
  OpAnnouncement a;
  a.node = 3;
  a.kind = OpKind::reduce_scatter;
  a.dtype = DType::bf16;
  a.redop = ReduceOp::max;
  a.root = 4000000000u;
  a.count = 0x123456789ULL;
  a.shape = {7, 0, -1, std::numeric_limits<int64_t>::max()};
  a.status = Status(Errc::shape_mismatch, "peer 0 has f32[4] but peer 1 has f32[5]");
  a.timeout_ms = 4000000000u;
  return a;
}

P2PHeaderData sample_header() {
  return {5, 4000000000u, std::numeric_limits<uint64_t>::max(), DType::i8, 1u << 30,
          Status(Errc::device_error, "peer 5 could not stage its tensor")};
}

void expect_in_range(const Status& s) {
  EXPECT_LE(static_cast<int>(s.code()), static_cast<int>(last_errc));
  (void)s.to_string();
}

// Decodes `bytes` as every message type; none may crash, and whatever decodes holds only values
// its C++ types can name. Returns how many decoded.
int decode_all(const std::string& bytes) {
  int ok = 0;
  std::string err;
  if (auto h = decode_data_hello(bytes.data(), bytes.size(), err)) ++ok;
  else EXPECT_FALSE(err.empty());
  err.clear();
  if (auto a = decode_announcement(bytes.data(), bytes.size(), err)) {
    ++ok;
    EXPECT_LT(static_cast<uint8_t>(a->kind), kKinds);
    EXPECT_LT(static_cast<uint8_t>(a->dtype), kDtypes);
    EXPECT_LT(static_cast<uint8_t>(a->redop), kRedops);
    expect_in_range(a->status);
  } else {
    EXPECT_FALSE(err.empty());
  }
  err.clear();
  if (auto h = decode_p2p_header(bytes.data(), bytes.size(), err)) {
    ++ok;
    EXPECT_LT(static_cast<uint8_t>(h->dtype), kDtypes);
    expect_in_range(h->failed);
  } else {
    EXPECT_FALSE(err.empty());
  }
  err.clear();
  if (auto a = decode_p2p_ack(bytes.data(), bytes.size(), err)) {
    ++ok;
    expect_in_range(a->status);
  } else {
    EXPECT_FALSE(err.empty());
  }
  return ok;
}

std::vector<std::string> valid_messages() {
  return {encode_data_hello({7, 0xfeedfaceULL, 2, 0x0123456789abcdefULL}), encode_announcement(sample_announcement()),
          encode_p2p_header(sample_header()),
          encode_p2p_ack({1, 2, 3, Status(Errc::dtype_mismatch, "sender has f32[4], receiver i32[4]")})};
}

std::string sealed(capnp::MessageBuilder& mb) { return envelope_bytes(seal(mb)); }

// ---------------------------------------------------------------- round trips

TEST(DataCodecRoundTrip, Hello) {
  const DataHello h{77, 0xfeedfaceULL, 4000000000u, std::numeric_limits<uint64_t>::max()};
  const std::string bytes = encode_data_hello(h);
  EXPECT_EQ(bytes.size() % 8, 0u);
  std::string err;
  auto d = decode_data_hello(bytes.data(), bytes.size(), err);
  ASSERT_TRUE(d) << err;
  EXPECT_EQ(d->protocol_version, 77u);
  EXPECT_EQ(d->collective, 0xfeedfaceULL);
  EXPECT_EQ(d->node, 4000000000u);
  EXPECT_EQ(d->token, std::numeric_limits<uint64_t>::max());
}

TEST(DataCodecRoundTrip, StragglersKeepTheirRanksInOrder) {
  std::string err;
  for (const std::vector<uint32_t>& ranks : {std::vector<uint32_t>{}, {3}, {7, 2, 4000000000u}}) {
    const std::string bytes = encode_stragglers(ranks);
    auto d = decode_stragglers(bytes.data(), bytes.size(), err);
    ASSERT_TRUE(d) << err;
    EXPECT_EQ(*d, ranks);
  }
  const std::string cut = encode_stragglers({1, 2, 3}).substr(0, 12);
  EXPECT_FALSE(decode_stragglers(cut.data(), cut.size(), err));
  EXPECT_FALSE(err.empty());
}

TEST(DataCodecRoundTrip, ALeavingNoteCarriesItsStatus) {
  std::string err;
  for (const Status& s : {Status(Errc::timeout, "all_reduce #5: rank 3 never called within the op's timeout"),
                          Status(Errc::node_lost, ""), Status::ok()}) {
    const std::string bytes = encode_leaving(s);
    auto d = decode_leaving(bytes.data(), bytes.size(), err);
    ASSERT_TRUE(d) << err;
    EXPECT_EQ(*d, s);
  }
}

TEST(DataCodecRoundTrip, AnnouncementWithEveryFieldSet) {
  const OpAnnouncement a = sample_announcement();
  const std::string bytes = encode_announcement(a);
  std::string err;
  auto d = decode_announcement(bytes.data(), bytes.size(), err);
  ASSERT_TRUE(d) << err;
  EXPECT_EQ(d->node, a.node);
  EXPECT_EQ(d->kind, a.kind);
  EXPECT_EQ(d->dtype, a.dtype);
  EXPECT_EQ(d->redop, a.redop);
  EXPECT_EQ(d->root, a.root);
  EXPECT_EQ(d->count, a.count);
  EXPECT_EQ(d->shape, a.shape);
  EXPECT_EQ(d->status.code(), Errc::shape_mismatch);
  EXPECT_EQ(d->status.message(), a.status.message());
  EXPECT_EQ(d->timeout_ms, 4000000000u);
}

TEST(DataCodecRoundTrip, AnnouncementOfAnNcclOpCarriesItsGpusCommunicatorAndId) {
  OpAnnouncement a = sample_announcement();
  a.status = Status::ok();
  a.gpu = true;
  a.devices = {3, 0, 7};
  a.nccl_live = 4;
  a.nccl_last = 5;
  for (int i = 0; i < 128; ++i) a.nccl_id.push_back(static_cast<char>(i * 7));
  const std::string bytes = encode_announcement(a);
  std::string err;
  auto d = decode_announcement(bytes.data(), bytes.size(), err);
  ASSERT_TRUE(d) << err;
  EXPECT_TRUE(d->gpu);
  EXPECT_EQ(d->devices, a.devices);
  EXPECT_EQ(d->nccl_live, 4u);
  EXPECT_EQ(d->nccl_last, 5u);
  EXPECT_EQ(d->nccl_id, a.nccl_id);
  // A host op's announcement says none of it.
  const std::string host = encode_announcement(sample_announcement());
  auto h = decode_announcement(host.data(), host.size(), err);
  ASSERT_TRUE(h) << err;
  EXPECT_FALSE(h->gpu);
  EXPECT_TRUE(h->devices.empty() && h->nccl_id.empty());
  EXPECT_EQ(h->nccl_last, 0u);
  // Nor does one whose peers gave no timeout of their own.
  a.timeout_ms = 0;
  const std::string none = encode_announcement(a);
  auto n = decode_announcement(none.data(), none.size(), err);
  ASSERT_TRUE(n) << err;
  EXPECT_EQ(n->timeout_ms, 0u);
}

TEST(DataCodecGarbled, AnAnnouncementWithANegativeGpuOrAnIdOfAnotherSizeIsRefused) {
  OpAnnouncement a;
  a.gpu = true;
  a.devices = {0, -1};
  std::string bytes = encode_announcement(a);
  std::string err;
  EXPECT_FALSE(decode_announcement(bytes.data(), bytes.size(), err));
  EXPECT_NE(err.find("negative GPU"), std::string::npos) << err;
  a.devices = {0};
  a.nccl_id = "short";
  bytes = encode_announcement(a);
  err.clear();
  EXPECT_FALSE(decode_announcement(bytes.data(), bytes.size(), err));
  EXPECT_NE(err.find("GPU fields out of range"), std::string::npos) << err;
}

TEST(DataCodecRoundTrip, AnnouncementOfEveryKindDtypeAndReduceOp) {
  std::string err;
  for (uint8_t k = 0; k < kKinds; ++k)
    for (uint8_t t = 0; t < kDtypes; ++t)
      for (uint8_t r = 0; r < kRedops; ++r) {
        OpAnnouncement a;
        a.kind = static_cast<OpKind>(k);
        a.dtype = static_cast<DType>(t);
        a.redop = static_cast<ReduceOp>(r);
        a.shape = {k, t, r};
        const std::string bytes = encode_announcement(a);
        auto d = decode_announcement(bytes.data(), bytes.size(), err);
        ASSERT_TRUE(d) << err;
        EXPECT_EQ(d->kind, a.kind);
        EXPECT_EQ(d->dtype, a.dtype);
        EXPECT_EQ(d->redop, a.redop);
        EXPECT_EQ(d->shape, a.shape);
        EXPECT_TRUE(d->status.is_ok());
      }
}

TEST(DataCodecRoundTrip, EveryErrorCodeInEveryMessageThatCarriesOne) {
  std::string err;
  for (uint16_t c = 0; c < kCodes; ++c) {
    const Status s = c == 0 ? Status::ok() : Status(static_cast<Errc>(c), "why " + std::to_string(c));
    OpAnnouncement a;
    a.status = s;
    std::string bytes = encode_announcement(a);
    auto da = decode_announcement(bytes.data(), bytes.size(), err);
    ASSERT_TRUE(da) << err;
    EXPECT_EQ(da->status.code(), s.code());
    EXPECT_EQ(da->status.message(), s.message());

    P2PHeaderData h = sample_header();
    h.failed = s;
    bytes = encode_p2p_header(h);
    auto dh = decode_p2p_header(bytes.data(), bytes.size(), err);
    ASSERT_TRUE(dh) << err;
    EXPECT_EQ(dh->source, 5u);
    EXPECT_EQ(dh->destination, 4000000000u);
    EXPECT_EQ(dh->tag, std::numeric_limits<uint64_t>::max());
    EXPECT_EQ(dh->dtype, DType::i8);
    EXPECT_EQ(dh->numel, 1u << 30);
    EXPECT_EQ(dh->failed.code(), s.code());
    EXPECT_EQ(dh->failed.message(), s.message());

    bytes = encode_p2p_ack({9, 8, 7, s});
    auto dk = decode_p2p_ack(bytes.data(), bytes.size(), err);
    ASSERT_TRUE(dk) << err;
    EXPECT_EQ(dk->source, 9u);
    EXPECT_EQ(dk->destination, 8u);
    EXPECT_EQ(dk->tag, 7u);
    EXPECT_EQ(dk->status.code(), s.code());
    EXPECT_EQ(dk->status.message(), s.message());
  }
}

TEST(DataCodecRoundTrip, HeaderOfEveryDtypeAndEncodingIsDeterministic) {
  std::string err;
  for (uint8_t t = 0; t < kDtypes; ++t) {
    P2PHeaderData h{1, 2, 3, static_cast<DType>(t), 12, Status::ok()};
    const std::string bytes = encode_p2p_header(h);
    auto d = decode_p2p_header(bytes.data(), bytes.size(), err);
    ASSERT_TRUE(d) << err;
    EXPECT_EQ(d->dtype, h.dtype);
    EXPECT_TRUE(d->failed.is_ok());
  }
  EXPECT_EQ(encode_announcement(sample_announcement()), encode_announcement(sample_announcement()));
  EXPECT_NE(encode_data_hello({1, 2, 3, 4}), encode_data_hello({1, 2, 3, 5}));
}

// ---------------------------------------------------------------- garbled payloads

TEST(DataCodecGarbled, EmptyAndTornWordsAreErrorsForEveryType) {
  std::string err;
  EXPECT_FALSE(decode_announcement(nullptr, 0, err));
  EXPECT_NE(err.find("garbled message"), std::string::npos) << err;
  EXPECT_NE(err.find("empty"), std::string::npos) << err;
  EXPECT_EQ(decode_all(std::string()), 0);
  // A payload that is not a whole number of words cannot be a message.
  for (const std::string& full : valid_messages())
    for (std::size_t cut : {std::size_t{1}, std::size_t{7}, full.size() - 1}) {
      const std::string torn = full.substr(0, cut);
      err.clear();
      EXPECT_FALSE(decode_p2p_header(torn.data(), torn.size(), err));
      EXPECT_NE(err.find("not a whole number of words"), std::string::npos) << err;
      EXPECT_EQ(decode_all(torn), 0) << cut;
    }
}

TEST(DataCodecGarbled, EveryTruncationIsAnError) {
  const auto valid = valid_messages();
  for (std::size_t m = 0; m < valid.size(); ++m) {
    const std::string& full = valid[m];
    ASSERT_GE(full.size(), 16u);
    for (std::size_t len = 0; len < full.size(); len += 8) {
      const std::string cut = full.substr(0, len);
      std::string err;
      bool decoded = false;
      switch (m) {
        case 0: decoded = decode_data_hello(cut.data(), cut.size(), err).has_value(); break;
        case 1: decoded = decode_announcement(cut.data(), cut.size(), err).has_value(); break;
        case 2: decoded = decode_p2p_header(cut.data(), cut.size(), err).has_value(); break;
        case 3: decoded = decode_p2p_ack(cut.data(), cut.size(), err).has_value(); break;
      }
      EXPECT_FALSE(decoded) << "message " << m << " truncated to " << len << " bytes decoded";
      EXPECT_NE(err.find("garbled message"), std::string::npos) << err;
      EXPECT_EQ(decode_all(cut), 0) << "message " << m << " truncated to " << len;
    }
  }
}

TEST(DataCodecGarbled, SegmentTablesThatLie) {
  Envelope e;
  e.words = {0xFFFFFFF000000000ULL, 0, 0};  // one segment, far longer than what follows
  EXPECT_EQ(decode_all(envelope_bytes(e)), 0);
  e.words = {0x00000000FFFFFFFFULL, 0, 0, 0};  // a huge segment count
  EXPECT_EQ(decode_all(envelope_bytes(e)), 0);
  e.words.assign(16, ~0ULL);
  EXPECT_EQ(decode_all(envelope_bytes(e)), 0);
}

TEST(DataCodecGarbled, RandomBytesNeverCrash) {
  std::mt19937_64 rng(4242);
  int decoded = 0;
  for (int i = 0; i < 3000; ++i) {
    Envelope e;
    const uint64_t size = 1 + rng() % 40;
    if (i % 2) e.words.push_back(size << 32);  // half behind a plausible segment table
    for (uint64_t k = 0; k < size; ++k) {
      uint64_t w = rng();
      if (rng() % 3 == 0) w &= 0x0000FFFF0000FFFFULL;  // small offsets and sizes: in-bounds pointers
      e.words.push_back(w);
    }
    decoded += decode_all(envelope_bytes(e));
  }
  SUCCEED() << decoded << " random payloads decoded to in-range values";
}

TEST(DataCodecGarbled, BitFlipsOfValidMessagesNeverCrash) {
  std::mt19937_64 rng(99);
  for (const std::string& v : valid_messages()) {
    for (std::size_t bit = 0; bit < v.size() * 8; ++bit) {
      std::string b = v;
      b[bit / 8] = static_cast<char>(b[bit / 8] ^ (1 << (bit % 8)));
      decode_all(b);
    }
    for (int i = 0; i < 200; ++i) {  // several random byte rewrites at once
      std::string b = v;
      for (int k = 0; k < 4; ++k) b[rng() % b.size()] = static_cast<char>(rng());
      decode_all(b);
    }
  }
}

std::string raw_announcement(uint8_t kind, uint8_t dtype, uint8_t redop, uint16_t code) {
  capnp::MallocMessageBuilder mb;
  auto b = mb.initRoot<wire::OpAnnounce>();
  b.setKind(kind);
  b.setDtype(dtype);
  b.setRedop(redop);
  b.setStatusCode(code);
  b.setStatusMessage("from the future");
  return sealed(mb);
}

TEST(DataCodecGarbled, OutOfRangeEnumsAndErrorCodesAreErrors) {
  std::string err;
  std::string ok = raw_announcement(kKinds - 1, kDtypes - 1, kRedops - 1, kCodes - 1);
  ASSERT_TRUE(decode_announcement(ok.data(), ok.size(), err)) << err;  // the last valid values decode
  for (const std::string& bad : {raw_announcement(kKinds, 0, 0, 0), raw_announcement(0, kDtypes, 0, 0),
                                 raw_announcement(0, 0, kRedops, 0), raw_announcement(0, 0, 0, kCodes),
                                 raw_announcement(255, 255, 255, 65535)}) {
    err.clear();
    EXPECT_FALSE(decode_announcement(bad.data(), bad.size(), err));
    EXPECT_NE(err.find("garbled message"), std::string::npos) << err;
  }
  err.clear();
  const std::string unknown_code = raw_announcement(0, 0, 0, kCodes);
  EXPECT_FALSE(decode_announcement(unknown_code.data(), unknown_code.size(), err));
  EXPECT_NE(err.find("unknown error code " + std::to_string(kCodes)), std::string::npos) << err;

  {
    capnp::MallocMessageBuilder mb;
    auto b = mb.initRoot<wire::P2PHeader>();
    b.setDtype(kDtypes);
    const std::string bad = sealed(mb);
    err.clear();
    EXPECT_FALSE(decode_p2p_header(bad.data(), bad.size(), err));
    EXPECT_NE(err.find("unknown dtype " + std::to_string(kDtypes)), std::string::npos) << err;
  }
  {
    capnp::MallocMessageBuilder mb;
    auto b = mb.initRoot<wire::P2PHeader>();
    b.setFailedCode(kCodes);
    b.setFailure("from the future");
    const std::string bad = sealed(mb);
    err.clear();
    EXPECT_FALSE(decode_p2p_header(bad.data(), bad.size(), err));
    EXPECT_NE(err.find("unknown error code"), std::string::npos) << err;
  }
  {
    capnp::MallocMessageBuilder mb;
    auto b = mb.initRoot<wire::P2PAck>();
    b.setStatusCode(65535);
    const std::string bad = sealed(mb);
    err.clear();
    EXPECT_FALSE(decode_p2p_ack(bad.data(), bad.size(), err));
    EXPECT_NE(err.find("unknown error code 65535"), std::string::npos) << err;
  }
}

TEST(DataCodecGarbled, AnOkCodeCarriesNoMessage) {
  // A sender that says "not failed" but adds text: the receiver sees a plain ok.
  capnp::MallocMessageBuilder mb;
  auto b = mb.initRoot<wire::P2PHeader>();
  b.setFailedCode(0);
  b.setFailure("stray text");
  const std::string bytes = sealed(mb);
  std::string err;
  auto d = decode_p2p_header(bytes.data(), bytes.size(), err);
  ASSERT_TRUE(d) << err;
  EXPECT_TRUE(d->failed.is_ok());
  EXPECT_EQ(d->failed.message(), "");
}

TEST(DataCodecGarbled, WrongMessageTypeNeverCrashes) {
  for (const std::string& m : valid_messages()) decode_all(m);
  // A hello read as an announcement: its words land in other fields, and whatever decodes is in range.
  const std::string hello = encode_data_hello({1, 2, 3, 4});
  std::string err;
  if (auto a = decode_announcement(hello.data(), hello.size(), err)) {
    EXPECT_LT(static_cast<uint8_t>(a->kind), kKinds);
    EXPECT_TRUE(a->shape.empty());
  }
}

} // namespace
} // namespace chorus
