// The BASP guard on its own (actors/orchestrator/basp_guard.hpp), fed frames made by CAF's own
// serializer: what a CAF client sends passes, whole or a byte at a time; the empty handshake that
// crashed CAF, routed messages, another node's name, a second identity, oversized claims, messages
// to actors it was never sent anything by, named receivers but CAF's own request and forwarding
// stacks are refused, each no later than the frame's last byte. (Part of
// orchestrator_front_door_test, which sends such frames to a daemon.)
#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/io/basp/header.hpp>
#include <caf/io/middleman.hpp>

#include <string>
#include <vector>

#include "actors/orchestrator/basp_server.hpp"
#include "actors/orchestrator/published.hpp"

namespace chorus {
namespace {

namespace basp = caf::io::basp;

caf::node_id node(uint32_t pid, char host) {
  caf::node_id::default_data::host_id_type h{};
  h.fill(static_cast<uint8_t>(host));
  return caf::make_node_id(pid, h);
}

const caf::node_id kClient = node(2, 'c');
const caf::node_id kOther = node(3, 'x');
constexpr caf::actor_id kOrchActor = 9;

// The orchestrator's side: an actor system of each test's own (its node id and types).
caf::actor_system* g_sys = nullptr;
caf::actor_system& orchestrator_system() { return *g_sys; }

// (The middleman gives a system its node id.)
caf::actor_system_config& with_middleman(caf::actor_system_config& cfg) {
  cfg.load<caf::io::middleman>();
  return cfg;
}

class BaspGuardTest : public ::testing::Test {
 protected:
  caf::actor_system_config cfg_;
  caf::actor_system sys_{with_middleman(cfg_)};
  const caf::node_id kOrch = sys_.node();
  void SetUp() override { g_sys = &sys_; }
  void TearDown() override { g_sys = nullptr; }
};

template <class... Ts>
std::string serialized(const Ts&... xs) {
  std::vector<char> buf;
  caf::binary_serializer sink{orchestrator_system(), buf};
  EXPECT_FALSE(sink(const_cast<Ts&>(xs)...));
  return std::string(buf.begin(), buf.end());
}

// A frame: CAF's header for `op` with the payload's length, then the payload.
std::string frame(basp::message_type op, const std::string& payload, uint8_t flags = 0, uint64_t data = 0,
                  caf::actor_id src = 0, caf::actor_id dst = 0) {
  basp::header h{op, flags, static_cast<uint32_t>(payload.size()), data, src, dst};
  return serialized(h) + payload;
}

std::string handshake(const caf::node_id& n, uint8_t flags = 0) {
  return frame(basp::message_type::client_handshake, serialized(n), flags);
}
std::string direct_message(caf::actor_id dst) {
  std::vector<caf::strong_actor_ptr> stack;
  caf::message msg = caf::make_message(std::string("register"), uint32_t{7});
  return frame(basp::message_type::direct_message, serialized(stack, msg), 0, 0, 42, dst);
}

// Feeds `bytes` one at a time; the index of the byte whose check refused, or -1.
long refused_at(BaspGuard& g, const std::string& bytes) {
  for (std::size_t i = 0; i < bytes.size(); ++i)
    if (!g.check(&bytes[i], 1).empty()) return static_cast<long>(i);
  return -1;
}

BaspGuard guard(uint32_t max = kDefaultMaxControlPayload) {
  return BaspGuard(basp_server(orchestrator_system(), kOrchActor), max);
}

// CAF's request for SpawnServ's info, as a new node's BASP sends it.
std::string info_request(const std::string& what = "info", caf::atom_value to = caf::atom("SpawnServ")) {
  std::vector<caf::strong_actor_ptr> stack;
  return frame(basp::message_type::direct_message,
               serialized(stack, caf::make_message(caf::sys_atom_v, caf::get_atom_v, what)), 0x01, 0, 31,
               static_cast<uint64_t>(to));
}

TEST_F(BaspGuardTest, WhatACafClientSendsPassesWholeOrAByteAtATime) {
  const std::string session = handshake(kClient) + info_request() + handshake(kClient, 0x02) + direct_message(9) +
                              frame(basp::message_type::monitor_message, serialized(kClient, kOrch), 0, 0, 0, 9) +
                              frame(basp::message_type::heartbeat, "") +
                              frame(basp::message_type::down_message,
                                    serialized(kClient, kOrch, caf::error(caf::exit_reason::normal)), 0, 0, 42, 0);
  BaspGuard whole = guard();
  EXPECT_EQ(whole.check(session.data(), session.size()), "");
  BaspGuard bytewise = guard();
  EXPECT_EQ(refused_at(bytewise, session), -1);
}

TEST_F(BaspGuardTest, TheEmptyHandshakeThatCrashedCafIsRefusedAtItsLastByte) {
  BaspGuard g = guard();
  const std::string empty = frame(basp::message_type::client_handshake, "");
  ASSERT_EQ(empty.size(), 32u);
  EXPECT_EQ(refused_at(g, empty), 31);
  EXPECT_NE(g.check("", 0), "") << "once refused, always refused";
}

TEST_F(BaspGuardTest, RoutedMessagesAndServerHandshakesAreNeverAClientsToSend) {
  const std::string routed =
      frame(basp::message_type::routed_message, serialized(kOrch, kOrch, std::vector<caf::strong_actor_ptr>{}), 0, 0, 5, 9);
  for (const std::string& bad : {routed, frame(basp::message_type::server_handshake, serialized(kClient), 0, 1)}) {
    BaspGuard g = guard();
    ASSERT_EQ(g.check(handshake(kClient).data(), handshake(kClient).size()), "");
    const std::string why = g.check(bad.data(), bad.size());
    EXPECT_NE(why.find("a node never sends"), std::string::npos) << why;
    BaspGuard fresh = guard();  // before the handshake too
    EXPECT_LT(refused_at(fresh, bad), 32);
  }
}

TEST_F(BaspGuardTest, NothingButAHandshakeComesFirst) {
  BaspGuard g = guard();
  const std::string msg = direct_message(9);
  EXPECT_EQ(g.check(msg.data(), msg.size()), "sent a direct message before its handshake");
  BaspGuard h = guard();
  const std::string beat = frame(basp::message_type::heartbeat, "");
  EXPECT_EQ(h.check(beat.data(), beat.size()), "sent a heartbeat before its handshake");
}

TEST_F(BaspGuardTest, AConnectionSpeaksForItsOwnNodeOnly) {
  const std::string hs = handshake(kClient);
  const std::string forged_monitor = frame(basp::message_type::monitor_message, serialized(kOther, kOrch), 0, 0, 0, 9);
  const std::string forged_down =
      frame(basp::message_type::down_message, serialized(kOther, kOrch, caf::error(caf::exit_reason::kill)), 0, 0, 42, 0);
  const std::string elsewhere = frame(basp::message_type::monitor_message, serialized(kClient, kOther), 0, 0, 0, 9);
  const std::string second_identity = handshake(kOther, 0x02);
  for (const std::string& bad : {forged_monitor, forged_down, elsewhere, second_identity}) {
    BaspGuard g = guard();
    ASSERT_EQ(g.check(hs.data(), hs.size()), "");
    const long at = refused_at(g, bad);
    EXPECT_GE(at, 32) << "refused by its payload";
    EXPECT_LT(at, static_cast<long>(bad.size())) << "refused before its last byte reached CAF";
  }
  BaspGuard g = guard();
  ASSERT_EQ(g.check(hs.data(), hs.size()), "");
  EXPECT_EQ(g.check(forged_down.data(), forged_down.size()), "sent a down message in another node's name");
  BaspGuard h = guard();
  ASSERT_EQ(h.check(hs.data(), hs.size()), "");
  EXPECT_EQ(h.check(second_identity.data(), second_identity.size()), "sent a second handshake for another node");
}

// A message goes to the orchestrator's actor, or answers an actor of its side that sent this
// connection something (seen in what the orchestrator sends, which may come in any pieces).
TEST_F(BaspGuardTest, AClientAnswersOnlyActorsThatSpokeToIt) {
  const std::string hs = handshake(kClient);
  BaspGuard g = guard();
  ASSERT_EQ(g.check(hs.data(), hs.size()), "");
  const std::string to_stranger = direct_message(33);
  EXPECT_EQ(g.check(to_stranger.data(), to_stranger.size()), "sent a message to actor 33, not the orchestrator's");
  BaspGuard h = guard();
  ASSERT_EQ(h.check(hs.data(), hs.size()), "");
  const std::string from_33 = frame(basp::message_type::heartbeat, "") +
                              frame(basp::message_type::direct_message, std::string(40, 'p'), 0, 0, 33, 5);
  for (char c : from_33) h.observe(&c, 1);
  EXPECT_EQ(h.check(to_stranger.data(), to_stranger.size()), "");
  const std::string to_34 = direct_message(34);
  EXPECT_NE(h.check(to_34.data(), to_34.size()), "");
}

// Requests whose answers the client does not read are bounded: the answers it reads (seen going
// its way) free their places.
TEST_F(BaspGuardTest, RequestsWithoutReadingTheAnswersAreBounded) {
  const std::string hs = handshake(kClient);
  BaspGuard g = guard();
  ASSERT_EQ(g.check(hs.data(), hs.size()), "");
  std::vector<caf::strong_actor_ptr> stack;
  const std::string payload = serialized(stack, caf::make_message(std::string("get")));
  auto request = [&](uint64_t id) { return frame(basp::message_type::direct_message, payload, 0, id, 42, kOrchActor); };
  for (uint64_t id = 1; id <= BaspGuard::kMaxUnanswered; ++id) {
    const std::string r = request(0x1000000000000000 | id);  // a normal message's request id
    ASSERT_EQ(g.check(r.data(), r.size()), "") << id;
  }
  const std::string async = frame(basp::message_type::direct_message, payload, 0, 0x1000000000000000, 42, kOrchActor);
  EXPECT_EQ(g.check(async.data(), async.size()), "") << "a message that asks nothing is not counted";
  const std::string answer = frame(basp::message_type::direct_message, payload, 0, 0x9000000000000001, kOrchActor, 42);
  g.observe(answer.data(), answer.size());  // one answer read: one more request may go
  const std::string next = request(0x1000000000000000 | 1000);
  EXPECT_EQ(g.check(next.data(), next.size()), "");
  const std::string over = request(0x1000000000000000 | 1001);
  EXPECT_EQ(g.check(over.data(), over.size()), "sent 257 requests without reading their answers");
}

TEST_F(BaspGuardTest, PayloadClaimsBeyondTheBoundAreRefusedAtTheHeader) {
  BaspGuard g = guard();
  const std::string hs = handshake(kClient);
  ASSERT_EQ(g.check(hs.data(), hs.size()), "");
  basp::header huge{basp::message_type::direct_message, 0, 256u << 20, 0, 42, 9};
  const std::string h = serialized(huge);
  EXPECT_EQ(g.check(h.data(), h.size()),
            "sent a direct message claiming 268435456 bytes of payload (the bound is 1048576)");
  // The bound is the caller's: a message of exactly the bound passes, one byte more does not.
  std::vector<caf::strong_actor_ptr> stack;
  const std::string msg = frame(basp::message_type::direct_message,
                                serialized(stack, caf::make_message(std::string(200, 'a'))), 0, 0, 42, kOrchActor);
  const auto len = static_cast<uint32_t>(msg.size() - 32);
  BaspGuard exact = guard(len);
  const std::string both = hs + msg;
  EXPECT_EQ(exact.check(both.data(), both.size()), "");
  BaspGuard tight = guard(len - 1);
  EXPECT_NE(tight.check(both.data(), both.size()), "");
}

TEST_F(BaspGuardTest, NamedReceiversForwardingStacksAndUnknownOperationsAreRefused) {
  const std::string hs = handshake(kClient);
  std::vector<caf::strong_actor_ptr> stack(1);
  const std::string with_stack =
      frame(basp::message_type::direct_message, serialized(stack, caf::make_message(1)), 0, 0, 42, 9);
  std::string named = direct_message(9);
  named[3] = 0x01;  // the named-receiver flag
  std::string unknown = frame(basp::message_type::heartbeat, "");
  unknown[0] = 7;
  for (const std::string& bad : {with_stack, named, unknown, info_request("inf0"), info_request("info", caf::atom("ConfigServ"))}) {
    BaspGuard g = guard();
    ASSERT_EQ(g.check(hs.data(), hs.size()), "");
    EXPECT_NE(g.check(bad.data(), bad.size()), "");
  }
}

} // namespace
} // namespace chorus
