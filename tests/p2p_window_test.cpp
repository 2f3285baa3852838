// What one node may leave in another's point-to-point mailbox is bounded (P2PWindow):
//  * the mailbox alone, with a small window: what it admits from each node, the room a sender
//    reserves (data with the header while it fits, else pulled; a wait for room beyond the
//    message window), a send that gave up keeping its room until its answer, pulls only of
//    messages a send waits with; pulled data, into the tensor of the receive that pulled it;
//  * two nodes in this process: sends whose data overrun the window arrive whole, received in
//    any order (the receive pulls what waits); a node that overruns the window, or sends data no
//    receive pulled, or sends another frame where a message's data belongs, has its link ended,
//    named to the receive that waits on it.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "actors/global_client/p2p.hpp"
#include "messages/data_codec.hpp"
#include "status_matchers.hpp"
#include "transport/frame.hpp"
#include "two_nodes.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;

// ---------------------------------------------------------------- the mailbox alone

class Mailbox : public ::testing::Test {
 protected:
  Mailbox() { poller.start({}); }
  ~Mailbox() override { poller.stop(); }

  static P2PMailbox::Message message(uint32_t node, uint64_t id, std::size_t data_bytes, bool pulled = false) {
    std::shared_ptr<std::byte> data(new std::byte[data_bytes + 1](), std::default_delete<std::byte[]>());
    return P2PMailbox::Message{0, DType::u8, data_bytes, pulled ? nullptr : data, pulled ? 0 : data_bytes,
                               Status::ok(), id, node, pulled};
  }
  Clock::time_point soon() const { return Clock::now() + 20ms; }
  Clock::time_point later() const { return Clock::now() + 20s; }

  P2PMailbox box{P2PWindow{100, 2}};
  Poller poller;
  const P2PMailbox::Key k{0, 1, 2, 7};
};

TEST_F(Mailbox, AdmitsFromEachNodeWhatItsWindowHolds) {
  std::string why;
  box.deliver(k, message(3, 1, 60));
  EXPECT_FALSE(box.admit(3, 50, why));
  EXPECT_EQ(why, "sent 110 bytes of data ahead of their receives, over the window of 100");
  EXPECT_TRUE(box.admit(3, 40, why));
  EXPECT_TRUE(box.admit(4, 100, why)) << "another node's window is its own";
  box.deliver(k, message(3, 2, 0, true));
  EXPECT_FALSE(box.admit(3, 0, why));
  EXPECT_EQ(why, "left more than 2 messages here that no receive took");
  // A receive takes the first: its room is free again.
  P2PMailbox::Message m;
  Status lost;
  ASSERT_EQ(box.take_message(k, 3, poller, later(), m, lost), P2PMailbox::Took::it);
  EXPECT_EQ(m.id, 1u);
  EXPECT_TRUE(box.admit(3, 100, why)) << why;
  // A withdrawn message frees its room too.
  EXPECT_TRUE(box.withdraw(k, 2));
  box.deliver(k, message(3, 3, 100));
  box.deliver(k, message(3, 4, 0));
  EXPECT_FALSE(box.admit(3, 0, why));
}

TEST_F(Mailbox, ASendReservesRoomAndItsDataGoesWithItWhileItFits) {
  bool eager = true;  // the planner lets each of these go eager (plan_p2p_eager)
  Status why;
  ASSERT_EQ(box.reserve(5, 80, poller, later(), eager, why), P2PMailbox::Took::it);
  EXPECT_TRUE(eager);
  ASSERT_EQ(box.reserve(5, 30, poller, later(), eager, why), P2PMailbox::Took::it);
  EXPECT_FALSE(eager) << "80 + 30 bytes overrun the window of 100: the data waits for the pull";
  // Two messages unanswered: a third waits for room, until its deadline...
  eager = true;
  EXPECT_EQ(box.reserve(5, 1, poller, soon(), eager, why), P2PMailbox::Took::nothing);
  // ... or until an answer frees some.
  std::thread answer([&] { box.unreserve(5, 80, true); });
  ASSERT_EQ(box.reserve(5, 20, poller, later(), eager, why), P2PMailbox::Took::it);
  answer.join();
  EXPECT_TRUE(eager);
  // Another node's window is its own.
  ASSERT_EQ(box.reserve(6, 100, poller, soon(), eager, why), P2PMailbox::Took::it);
  EXPECT_TRUE(eager);
  // A message the planner keeps for the pull waits for it, whatever room is left.
  eager = false;
  ASSERT_EQ(box.reserve(7, 1, poller, soon(), eager, why), P2PMailbox::Took::it);
  EXPECT_FALSE(eager);
  // A lost node ends a wait for room.
  box.node_lost(Status(Errc::node_lost, "node 5 lost"));
  EXPECT_EQ(box.reserve(5, 1, poller, later(), eager, why), P2PMailbox::Took::ended);
  EXPECT_EQ(why.message(), "node 5 lost");
}

TEST_F(Mailbox, ASendThatGaveUpKeepsItsRoomUntilItsAnswerComes) {
  bool eager = true;
  Status why;
  ASSERT_EQ(box.reserve(5, 10, poller, later(), eager, why), P2PMailbox::Took::it);
  ASSERT_EQ(box.reserve(5, 10, poller, later(), eager, why), P2PMailbox::Took::it);
  // The first send gives up on its answer: the receiving node may still hold its message.
  EXPECT_FALSE(box.abandon(k, 1, 5, 10, true).has_value());
  EXPECT_EQ(box.reserve(5, 1, poller, soon(), eager, why), P2PMailbox::Took::nothing);
  box.answer(k, 1, Status::ok());  // it comes: dropped, and the room is free
  ASSERT_EQ(box.reserve(5, 1, poller, soon(), eager, why), P2PMailbox::Took::it);
  Status a;
  EXPECT_EQ(box.take_answer(k, 1, 5, poller, soon(), a, why), P2PMailbox::Took::nothing) << "a dropped answer came back";
}

TEST_F(Mailbox, OnlyAMessageWhoseSendWaitsIsPulledAndOnce) {
  box.pull(k, 9);  // no send waits with message 9: dropped
  box.awaits_pull(k, 9);
  EXPECT_FALSE(box.pulled(k, 9));
  box.pull(k, 9);
  box.pull(k, 9);  // a second pull of it is dropped
  EXPECT_TRUE(box.pulled(k, 9));
  EXPECT_FALSE(box.pulled(k, 9));
  EXPECT_FALSE(box.forget_pull(k, 9)) << "its pull was taken";
  box.awaits_pull(k, 10);
  EXPECT_FALSE(box.forget_pull(k, 10));  // its send returned
  box.pull(k, 10);
  EXPECT_FALSE(box.pulled(k, 10));
  // A pull that comes as its send gives up: forget_pull says so, and the receive is told.
  box.awaits_pull(k, 11);
  EXPECT_TRUE(box.pull(k, 11));
  EXPECT_TRUE(box.forget_pull(k, 11));
}

TEST_F(Mailbox, PulledDataLandsInItsReceivesTensorOnlyFromItsNodeAtItsSize) {
  std::string why;
  EXPECT_EQ(box.body(3, 1, 4, why), nullptr);
  EXPECT_EQ(why, "sent data for message 1, which no header announced and no receive here pulled");
  std::array<std::byte, 4> into{};
  box.expect_pull(k, 1, 3, into.data(), into.size());
  why.clear();
  EXPECT_EQ(box.body(2, 1, 4, why), nullptr);
  EXPECT_EQ(why, "sent data for message 1, which no header announced and no receive here pulled") << "another node's";
  why.clear();
  EXPECT_EQ(box.body(3, 1, 5, why), nullptr);
  EXPECT_EQ(why, "sent 5 bytes for message 1, of which a receive here pulled 4");
  why.clear();
  ASSERT_EQ(box.body(3, 1, 4, why), into.data()) << "straight into the receive's tensor";
  EXPECT_EQ(why, "");
  Status status, lost;
  EXPECT_EQ(box.take_pulled(k, 1, 3, poller, soon(), status, lost), P2PMailbox::Took::nothing) << "before its frame ended";
  box.body_done(3, 1);
  ASSERT_EQ(box.take_pulled(k, 1, 3, poller, later(), status, lost), P2PMailbox::Took::it);
  EXPECT_TRUE(status.is_ok());
  EXPECT_EQ(box.body(3, 1, 4, why), nullptr);
  EXPECT_NE(why, "") << "pulled once";
  // A receive that gave up drops the data that comes after; data being written into its tensor
  // keeps it until the frame ends (here: its connection dies midway).
  box.expect_pull(k, 2, 3, into.data(), into.size());
  EXPECT_EQ(box.give_up_pull(k, 2, 3), nullptr) << "nothing is being written";
  why.clear();
  EXPECT_EQ(box.body(3, 2, 4, why), nullptr);
  EXPECT_EQ(why, "") << "read and dropped, not a broken rule";
  box.expect_pull(k, 3, 3, into.data(), into.size());
  ASSERT_EQ(box.body(3, 3, 4, why), into.data());
  auto writing = box.give_up_pull(k, 3, 3);
  ASSERT_NE(writing, nullptr);
  EXPECT_EQ(writing->value.load(), 0u);
  box.body_failed(3, 3);
  EXPECT_EQ(writing->value.load(), 1u);
  EXPECT_EQ(box.take_pulled(k, 3, 3, poller, soon(), status, lost), P2PMailbox::Took::nothing);
  // A sender whose send gave up says so, without data.
  box.expect_pull(k, 4, 3, into.data(), into.size());
  EXPECT_FALSE(box.deliver_pulled(k, 4, 2, Status(Errc::timeout, "gave up"))) << "from another node";
  EXPECT_FALSE(box.deliver_pulled(k, 4, 3, Status::ok())) << "an answer without its data says why";
  ASSERT_TRUE(box.deliver_pulled(k, 4, 3, Status(Errc::timeout, "gave up")));
  ASSERT_EQ(box.take_pulled(k, 4, 3, poller, later(), status, lost), P2PMailbox::Took::it);
  EXPECT_EQ(status, Status(Errc::timeout, "gave up"));
}

// A receive posted first takes a message before one posted later (MPI's order of posting), for as
// long as it waits for one: a receive from any source that the local server paired at its call
// holds nothing back, though it is still posted until its line runs it.
TEST_F(Mailbox, AReceivePostedEarlierHoldsMessagesBackOnlyWhileItWaitsForOne) {
  std::atomic<bool> paired{false};
  P2PMailbox::Posted any(box, {0, kAnySource, 2, 7}, [&] { return !paired.load(); });
  P2PMailbox::Posted mine(box, k);
  box.deliver(k, message(3, 1, 4));
  P2PMailbox::Message m;
  Status why;
  EXPECT_EQ(box.take_message(k, 3, poller, soon(), m, why, mine.ticket()), P2PMailbox::Took::nothing)
      << "taken from the receive posted first";
  paired = true;
  ASSERT_EQ(box.take_message(k, 3, poller, later(), m, why, mine.ticket()), P2PMailbox::Took::it);
  EXPECT_EQ(m.id, 1u);
}

// An eager message whose receive already waits lands in that receive's tensor (no buffer of its
// own, no copy): only in the receive that will take it, of its type and length, once.
TEST_F(Mailbox, EagerDataLandsInTheTensorOfTheReceiveThatWaitsForIt) {
  std::array<std::byte, 4> into{};
  const P2PMailbox::Landing landing{into.data(), DType::u8, 4, 4};
  auto header = [](uint64_t id, uint64_t numel = 4, DType dt = DType::u8) {  // as the frame routing has it
    return P2PMailbox::Message{0, dt, numel, nullptr, numel * dtype_size(dt), Status::ok(), id, 3};
  };
  P2PMailbox::Posted mine(box, k);
  auto m = header(1);
  EXPECT_EQ(box.land(k, m), nullptr) << "its receive does not wait yet";
  P2PMailbox::Message out;
  Status why;
  ASSERT_EQ(box.take_message(k, 3, poller, soon(), out, why, mine.ticket(), &landing), P2PMailbox::Took::nothing);
  auto wrong = header(1, 2, DType::f16);
  EXPECT_EQ(box.land(k, wrong), nullptr) << "another type: the receive reports the mismatch";
  auto longer = header(1, 5);
  EXPECT_EQ(box.land(k, longer), nullptr) << "another length";
  ASSERT_EQ(box.land(k, m), into.data());
  EXPECT_EQ(m.landed_in, mine.ticket());
  EXPECT_EQ(m.data.get(), into.data());
  auto second = header(2);
  EXPECT_EQ(box.land(k, second), nullptr) << "one message a receive";
  std::shared_ptr<WaitWord> writing;
  EXPECT_EQ(box.settle_landing(mine.ticket(), out, writing), P2PMailbox::Took::nothing);
  ASSERT_NE(writing, nullptr) << "its frame is being read in";
  EXPECT_EQ(writing->value.load(), 0u);
  std::memcpy(into.data(), "abcd", 4);  // the transport writes it
  box.deliver(k, m);
  EXPECT_EQ(writing->value.load(), 1u);
  writing.reset();
  ASSERT_EQ(box.settle_landing(mine.ticket(), out, writing), P2PMailbox::Took::it) << "it came as the receive gave up";
  EXPECT_EQ(out.id, 1u);
  EXPECT_EQ(out.data.get(), into.data());
  EXPECT_EQ(std::memcmp(into.data(), "abcd", 4), 0);
  std::string admitted;
  EXPECT_TRUE(box.admit(3, 100, admitted)) << "its room in the window is free again: " << admitted;
}

TEST_F(Mailbox, EagerDataLandsOnlyWhereNothingGoesAheadOfIt) {
  std::array<std::byte, 4> into{};
  const P2PMailbox::Landing landing{into.data(), DType::u8, 4, 4};
  auto header = [](uint64_t id) { return P2PMailbox::Message{0, DType::u8, 4, nullptr, 4, Status::ok(), id, 3}; };
  P2PMailbox::Message out;
  Status why;
  {  // a receive posted earlier for the same pair, which would take it
    P2PMailbox::Posted first(box, k);
    P2PMailbox::Posted mine(box, k);
    EXPECT_EQ(box.take_message(k, 3, poller, soon(), out, why, mine.ticket(), &landing), P2PMailbox::Took::nothing);
    auto m = header(1);
    EXPECT_EQ(box.land(k, m), nullptr);
    std::shared_ptr<WaitWord> writing;
    EXPECT_EQ(box.settle_landing(mine.ticket(), out, writing), P2PMailbox::Took::nothing);
    EXPECT_EQ(writing, nullptr);
  }
  {  // a receive from any source posted earlier, while it waits
    P2PMailbox::Posted any(box, {0, kAnySource, 2, 7});
    P2PMailbox::Posted mine(box, k);
    EXPECT_EQ(box.take_message(k, 3, poller, soon(), out, why, mine.ticket(), &landing), P2PMailbox::Took::nothing);
    auto m = header(2);
    EXPECT_EQ(box.land(k, m), nullptr);
  }
  {  // an earlier message of the pair, queued
    P2PMailbox::Posted mine(box, k);
    EXPECT_EQ(box.take_message(k, 3, poller, soon(), out, why, mine.ticket(), &landing), P2PMailbox::Took::nothing);
    box.deliver(k, message(3, 3, 4));
    auto m = header(4);
    EXPECT_EQ(box.land(k, m), nullptr);
    ASSERT_EQ(box.take_message(k, 3, poller, later(), out, why, mine.ticket(), &landing), P2PMailbox::Took::it);
    EXPECT_EQ(out.id, 3u);
    EXPECT_NE(out.data.get(), into.data()) << "in a buffer of its own";
    EXPECT_EQ(box.land(k, m), nullptr) << "a receive that took its message takes no other";
  }
}

TEST_F(Mailbox, AWaitingReceiveWakesWithTheMessageThatLandedInItsTensorAndNoOtherTakesIt) {
  std::array<std::byte, 4> into{};
  const P2PMailbox::Landing landing{into.data(), DType::u8, 4, 4};
  auto header = [](uint64_t id) { return P2PMailbox::Message{0, DType::u8, 4, nullptr, 4, Status::ok(), id, 3}; };
  const std::function<bool()> never = [] { return false; };
  P2PMailbox::Message out, other;
  Status why;
  P2PMailbox::Key taken_key;
  {
    P2PMailbox::Posted mine(box, k);
    P2PMailbox::Took took = P2PMailbox::Took::nothing;
    std::thread receive([&] { took = box.take_message(k, 3, poller, later(), out, why, mine.ticket(), &landing); });
    for (const auto until = Clock::now() + 10s; box.offered() == 0 && Clock::now() < until;) std::this_thread::yield();
    ASSERT_EQ(box.offered(), 1u);
    P2PMailbox::Posted any(box, {0, kAnySource, 2, 7});  // posted later: it does not take it
    auto m = header(1);
    ASSERT_EQ(box.land(k, m), into.data());
    box.deliver(k, m);
    receive.join();
    ASSERT_EQ(took, P2PMailbox::Took::it);
    EXPECT_EQ(out.id, 1u);
    EXPECT_EQ(out.data.get(), into.data());
    EXPECT_EQ(box.offered(), 0u) << "a receive that took its message offers its tensor no more";
  }
  // A message that landed in a receive that gave up just then is that one's: a receive from any
  // source does not take it, and its receive's settling does.
  P2PMailbox::Posted mine(box, k);
  ASSERT_EQ(box.take_message(k, 3, poller, soon(), out, why, mine.ticket(), &landing), P2PMailbox::Took::nothing);
  auto m = header(2);
  ASSERT_EQ(box.land(k, m), into.data());
  box.deliver(k, m);
  P2PMailbox::Posted any(box, {0, kAnySource, 2, 7});
  EXPECT_EQ(box.take_any(0, 2, 7, {1}, {3}, poller, soon(), never, taken_key, other, why, any.ticket()),
            P2PMailbox::Took::nothing);
  std::shared_ptr<WaitWord> writing;
  ASSERT_EQ(box.settle_landing(mine.ticket(), out, writing), P2PMailbox::Took::it);
  EXPECT_EQ(out.id, 2u);
}

TEST_F(Mailbox, DataThatFailsToLandLeavesTheReceiveToItsWait) {
  std::array<std::byte, 4> into{};
  const P2PMailbox::Landing landing{into.data(), DType::u8, 4, 4};
  P2PMailbox::Message out;
  Status why;
  std::shared_ptr<WaitWord> writing;
  {
    P2PMailbox::Posted mine(box, k);
    EXPECT_EQ(box.take_message(k, 3, poller, soon(), out, why, mine.ticket(), &landing), P2PMailbox::Took::nothing);
    P2PMailbox::Message m{0, DType::u8, 4, nullptr, 4, Status::ok(), 1, 3};
    ASSERT_EQ(box.land(k, m), into.data());
    EXPECT_EQ(box.settle_landing(mine.ticket(), out, writing), P2PMailbox::Took::nothing);
    ASSERT_NE(writing, nullptr);
    box.land_failed(m);  // its connection died midway
    EXPECT_EQ(writing->value.load(), 1u);
    writing.reset();
    EXPECT_EQ(box.settle_landing(mine.ticket(), out, writing), P2PMailbox::Took::nothing);
    EXPECT_EQ(writing, nullptr);
  }
  {  // Data that lands for a receive that has returned meanwhile (its link cut) is dropped.
    P2PMailbox::Posted again(box, k);
    EXPECT_EQ(box.take_message(k, 3, poller, soon(), out, why, again.ticket(), &landing), P2PMailbox::Took::nothing);
    P2PMailbox::Message late{0, DType::u8, 4, nullptr, 4, Status::ok(), 2, 3};
    ASSERT_EQ(box.land(k, late), into.data());
    EXPECT_EQ(box.settle_landing(again.ticket(), out, writing), P2PMailbox::Took::nothing);
    writing.reset();
    out = late;
  }
  box.deliver(k, out);
  {  // ... and so is one that lands whole after its receive settled, before its place went
    P2PMailbox::Posted third(box, k);
    EXPECT_EQ(box.take_message(k, 3, poller, soon(), out, why, third.ticket(), &landing), P2PMailbox::Took::nothing);
    P2PMailbox::Message late{0, DType::u8, 4, nullptr, 4, Status::ok(), 3, 3};
    ASSERT_EQ(box.land(k, late), into.data());
    EXPECT_EQ(box.settle_landing(third.ticket(), out, writing), P2PMailbox::Took::nothing);
    box.deliver(k, late);
  }
  std::string admitted;
  EXPECT_TRUE(box.admit(3, 100, admitted)) << "its room in the window is free: " << admitted;
  P2PMailbox::Posted next(box, k);
  box.deliver(k, message(3, 4, 4));
  ASSERT_EQ(box.take_message(k, 3, poller, later(), out, why, next.ticket()), P2PMailbox::Took::it)
      << "nothing of theirs is left ahead of the pair's next message";
  EXPECT_EQ(out.id, 4u);
}

TEST_F(Mailbox, AnAnswerIsKeptOnlyForASendThatWaitsForIt) {
  Status a, why;
  box.answer(k, 1, Status::ok());  // no send of ours: dropped
  box.sent(k, 2);
  box.answer(k, 2, Status(Errc::shape_mismatch, "two"));
  EXPECT_EQ(box.take_answer(k, 1, 5, poller, soon(), a, why), P2PMailbox::Took::nothing);
  ASSERT_EQ(box.take_answer(k, 2, 5, poller, later(), a, why), P2PMailbox::Took::it);
  EXPECT_EQ(a, Status(Errc::shape_mismatch, "two"));
  // One that comes as its send returns goes with it.
  box.sent(k, 3);
  box.answer(k, 3, Status::ok());
  box.returned(k, 3);
  box.sent(k, 3);
  EXPECT_EQ(box.take_answer(k, 3, 5, poller, soon(), a, why), P2PMailbox::Took::nothing);
}

// ---------------------------------------------------------------- two nodes in this process

std::vector<float> filled(std::size_t n, float first) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = first + static_cast<float>(i % 1000);
  return v;
}

// A sends three tensors to C at once whose data together overrun the window (3 x 30 MiB against
// 64 MiB); C receives them last first. What fits goes with its header, the rest waits at A until
// C's receive pulls it; everything arrives whole. (Were A to send all three eagerly, C's node
// would end the link; were A to wait for room, C's first receive would time out.)
TEST(P2PWindowAcrossNodes, SendsThatOverrunTheWindowArriveWholeInAnyOrder) {
  TwoNodes two;
  ASSERT_TRUE(two.join());
  const uint64_t window = two.there().p2p().window().bytes;
  const std::size_t n = (window * 15 / 32) / sizeof(float);  // 30 MiB of 64
  std::vector<Tensor> out;
  std::vector<Work> sends;
  for (int tag = 1; tag <= 3; ++tag) out.push_back(Tensor::from(filled(n, 1000.0f * tag)));
  for (int tag = 1; tag <= 3; ++tag) sends.push_back(two.a->send_async(out[tag - 1], two.c->rank(), tag));
  for (int tag = 3; tag >= 1; --tag) {
    Tensor in = Tensor::zeros(DType::f32, {static_cast<int64_t>(n)});
    ASSERT_TRUE(two.c->recv(in, two.a->rank(), tag).is_ok()) << tag;
    EXPECT_EQ(std::memcmp(in.data(), out[tag - 1].data(), in.nbytes()), 0) << "tag " << tag << " arrived changed";
  }
  for (auto& w : sends) EXPECT_TRUE(w.wait_for(20s).is_ok());
  // One tensor larger than the whole window goes alone, pulled.
  std::vector<float> big = filled(window / sizeof(float) + 1024, 7.0f);
  const Tensor whole = Tensor::from(big);
  Work sent = two.a->send_async(whole, two.c->rank(), 4);
  Tensor in = Tensor::zeros(DType::f32, {static_cast<int64_t>(big.size())});
  ASSERT_TRUE(two.c->recv(in, two.a->rank(), 4).is_ok());
  EXPECT_EQ(std::memcmp(in.data(), big.data(), in.nbytes()), 0);
  EXPECT_TRUE(sent.wait_for(20s).is_ok());
  // A pulled message whose receive does not match fails both sides alike, no data moved.
  Work wrong = two.a->send_async(whole, two.c->rank(), 5);
  Tensor small = Tensor::zeros(DType::f32, {3});
  const Status got = two.c->recv(small, two.a->rank(), 5);
  EXPECT_TRUE(has(got, Errc::shape_mismatch, {"sender has f32[" + std::to_string(big.size()) + "], receiver f32[3]"}))
      << got.to_string();
  EXPECT_EQ(wrong.wait_for(20s), got);
}

// Receives that wait before their messages come have the data written straight into their
// tensors (p2p_landing.cpp): each gets its own message whole, the first posted the first sent; one
// whose length differs fails like its send, and the next receive of the pair still gets its own.
TEST(P2PWindowAcrossNodes, ReceivesPostedFirstGetTheirOwnMessagesWhole) {
  TwoNodes two;
  ASSERT_TRUE(two.join());
  const std::vector<std::size_t> sizes{1, 1000, 16384, 262144};  // floats, up to 1 MiB: eager
  std::vector<Tensor> in;
  in.reserve(2 * sizes.size() + 2);
  std::vector<Work> recvs, sends;
  for (std::size_t t = 0; t < sizes.size(); ++t)
    for (int j = 0; j < 2; ++j) {
      in.push_back(Tensor::zeros(DType::f32, {static_cast<int64_t>(sizes[t])}));
      recvs.push_back(two.c->recv_async(in.back(), two.a->rank(), t + 1));
    }
  std::vector<Tensor> out;
  for (std::size_t t = 0; t < sizes.size(); ++t)
    for (int j = 0; j < 2; ++j) out.push_back(Tensor::from(filled(sizes[t], 100.0f * (t + 1) + 10.0f * j)));
  for (std::size_t i = 0; i < out.size(); ++i) sends.push_back(two.a->send_async(out[i], two.c->rank(), i / 2 + 1));
  for (std::size_t i = 0; i < out.size(); ++i) {
    ASSERT_TRUE(recvs[i].wait_for(20s).is_ok()) << i;
    EXPECT_TRUE(sends[i].wait_for(20s).is_ok()) << i;
    EXPECT_EQ(std::memcmp(in[i].data(), out[i].data(), in[i].nbytes()), 0) << "receive " << i << " got another's data";
  }
  in.push_back(Tensor::zeros(DType::f32, {3}));
  Work wrong = two.c->recv_async(in.back(), two.a->rank(), 9);
  in.push_back(Tensor::zeros(DType::f32, {1000}));
  Work right = two.c->recv_async(in.back(), two.a->rank(), 9);
  const Tensor four = Tensor::from(filled(4, 1.0f)), thousand = Tensor::from(filled(1000, 2.0f));
  const Status sent = two.a->send(four, two.c->rank(), 9);
  EXPECT_TRUE(has(sent, Errc::shape_mismatch, {"sender has f32[4], receiver f32[3]"})) << sent.to_string();
  EXPECT_EQ(wrong.wait_for(20s), sent);
  ASSERT_TRUE(two.a->send(thousand, two.c->rank(), 9).is_ok());
  ASSERT_TRUE(right.wait_for(20s).is_ok());
  EXPECT_EQ(std::memcmp(in.back().data(), thousand.data(), thousand.nbytes()), 0);
}

// A receive that waits when its message comes has the data written straight into its tensor.
TEST(P2PWindowAcrossNodes, AnEagerMessageLandsInTheTensorOfTheReceiveThatWaitsForIt) {
  TwoNodes two;
  ASSERT_TRUE(two.join());
  P2PMailbox& box = two.there().p2p();
  const uint64_t before = box.landings();
  Tensor in = Tensor::zeros(DType::f32, {4096});
  Status got(Errc::internal, "not received");
  std::thread receive([&] { got = two.c->recv(in, two.a->rank(), 3); });
  for (const auto until = Clock::now() + 10s; box.offered() == 0 && Clock::now() < until;) std::this_thread::yield();
  ASSERT_EQ(box.offered(), 1u) << "the receive never waited with its tensor offered";
  const Tensor out = Tensor::from(filled(4096, 5.0f));
  const Status sent = two.a->send(out, two.c->rank(), 3);
  receive.join();
  ASSERT_TRUE(sent.is_ok()) << sent.to_string();
  ASSERT_TRUE(got.is_ok()) << got.to_string();
  EXPECT_EQ(std::memcmp(in.data(), out.data(), out.nbytes()), 0);
  EXPECT_EQ(box.landings(), before + 1) << "it went through a buffer of its own";
  EXPECT_EQ(box.offered(), 0u);
}

// A tensor without elements has no data frame: it arrives as its header alone, on both paths.
TEST(P2PWindowAcrossNodes, AnEmptyTensorCrossesAsItsHeaderAlone) {
  for (const char* eager : {"65536", "0"}) {
    setenv("CHORUS_P2P_EAGER_KIB", eager, 1);  // read as the nodes join
    TwoNodes two;
    const bool joined = two.join();
    unsetenv("CHORUS_P2P_EAGER_KIB");
    ASSERT_TRUE(joined);
    Tensor none = Tensor::zeros(DType::f32, {0}), got = Tensor::zeros(DType::f32, {0});
    Work sent = two.a->send_async(none, two.c->rank(), 3);
    EXPECT_TRUE(two.c->recv(got, two.a->rank(), 3).is_ok()) << eager;
    EXPECT_TRUE(sent.wait_for(20s).is_ok()) << eager;
  }
}

// A node (here forged, from A's node) that sends more data than the window ahead of its receives:
// C's node ends the link, and C's receive that waits on it fails at once naming why.
TEST(P2PWindowAcrossNodes, ANodeThatOverrunsTheDataWindowHasItsLinkEnded) {
  TwoNodes two;
  ASSERT_TRUE(two.join());
  GlobalClient& forger = two.here();
  const uint32_t a = two.a->rank(), c = two.c->rank();
  const uint64_t window = two.there().p2p().window().bytes;
  const std::string data(window / 2 + 1, 'x');
  for (uint64_t id = 1; id <= 2; ++id) {
    two.forge(FrameType::p2p_data, a, c, encode_p2p_header({a, c, 7, DType::u8, data.size(), Status::ok(), id}));
    two.forge_body(id, data.data(), data.size())->done.wait_at_least(1, Clock::now() + 20s);
  }
  Tensor t = Tensor::zeros(DType::u8, {1});
  const auto t0 = std::chrono::steady_clock::now();
  const Status got = two.c->recv(t, a, 8);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s) << "C waited out its timeout";
  EXPECT_TRUE(has(got, Errc::node_lost,
                  {"node " + std::to_string(forger.node_id()) + " sent " + std::to_string(2 * data.size()) +
                   " bytes of data ahead of their receives, over the window of " + std::to_string(window)}))
      << got.to_string();
}

// A receive that takes a header whose send gave up (here: there was none; node 0's header is
// forged) is told so by the sender's node when it pulls, and fails at once rather than waiting out
// its timeout; the link stays (the next exchange works).
TEST(P2PWindowAcrossNodes, AReceiveThatPullsFromASendThatGaveUpFailsAtOnce) {
  TwoNodes two;
  ASSERT_TRUE(two.join());
  const uint32_t a = two.a->rank(), c = two.c->rank();
  P2PHeaderData head{a, c, 7, DType::i32, 1, Status::ok(), 77};
  head.pulled = true;
  two.forge(FrameType::p2p_data, a, c, encode_p2p_header(head));
  Tensor t = Tensor::zeros(DType::i32, {1});
  const auto t0 = std::chrono::steady_clock::now();
  const Status got = two.c->recv(t, a, 7);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s) << "C waited out its timeout";
  EXPECT_TRUE(has(got, Errc::timeout, {"peer " + std::to_string(a) + " gave up on its send"})) << got.to_string();
  Tensor x = Tensor::from(std::vector<int32_t>{5});
  Work sent = two.a->send_async(x, c, 8);
  ASSERT_TRUE(two.c->recv(t, a, 8).is_ok());
  EXPECT_EQ(t.data_as<int32_t>()[0], 5);
  EXPECT_TRUE(sent.wait_for(20s).is_ok());
}

// A header longer than a header may be (a long failure text) is refused too: headers alone would
// otherwise hold up to 1 MiB each, past what the message window means to bound.
TEST(P2PWindowAcrossNodes, ANodeThatSendsAnOverlongHeaderHasItsLinkEnded) {
  TwoNodes two;
  ASSERT_TRUE(two.join());
  GlobalClient& forger = two.here();
  const uint32_t a = two.a->rank(), c = two.c->rank();
  std::string bytes = encode_p2p_header({a, c, 7, DType::u8, 1, Status(Errc::device_error, std::string(4000, 'x')), 1});
  const std::size_t header = bytes.size();
  two.forge(FrameType::p2p_data, a, c, std::move(bytes));
  Tensor t = Tensor::zeros(DType::u8, {1});
  const Status got = two.c->recv(t, a, 8);
  EXPECT_TRUE(has(got, Errc::node_lost,
                  {"node " + std::to_string(forger.node_id()) + " sent a send header of " + std::to_string(header) +
                   " bytes, over the 1024 a header may take"}))
      << got.to_string();
}

// So too a node that leaves more messages than the window (headers alone, their data said to
// wait), and one that sends data for a message that no header announced and no receive pulled.
TEST(P2PWindowAcrossNodes, ANodeThatOverrunsTheMessageWindowHasItsLinkEnded) {
  TwoNodes two;
  ASSERT_TRUE(two.join());
  GlobalClient& forger = two.here();
  const uint32_t a = two.a->rank(), c = two.c->rank();
  const uint32_t most = two.there().p2p().window().messages;
  std::shared_ptr<SendTicket> last;
  for (uint64_t id = 1; id <= most + 1; ++id) {
    P2PHeaderData head{a, c, 7, DType::u8, 1, Status::ok(), id};
    head.pulled = true;
    last = two.forge(FrameType::p2p_data, a, c, encode_p2p_header(head));
  }
  last->done.wait_at_least(1, Clock::now() + 20s);
  Tensor t = Tensor::zeros(DType::u8, {1});
  const Status got = two.c->recv(t, a, 8);
  EXPECT_TRUE(has(got, Errc::node_lost,
                  {"node " + std::to_string(forger.node_id()) + " left more than " + std::to_string(most) +
                   " messages here that no receive took"}))
      << got.to_string();
}

// An eager message's data is the frame right after its header (one write): a node that sends
// anything else there breaks the protocol, and the message is not delivered without its data.
TEST(P2PWindowAcrossNodes, ANodeThatSendsAnotherFrameWhereAMessagesDataBelongsHasItsLinkEnded) {
  TwoNodes two;
  ASSERT_TRUE(two.join());
  GlobalClient& forger = two.here();
  const uint32_t a = two.a->rank(), c = two.c->rank();
  two.forge(FrameType::p2p_data, a, c, encode_p2p_header({a, c, 7, DType::i32, 1, Status::ok(), 5}));
  two.forge(FrameType::p2p_data, a, c, encode_p2p_header({a, c, 7, DType::i32, 0, Status::ok(), 6}));
  Tensor t = Tensor::zeros(DType::i32, {1});
  const Status got = two.c->recv(t, a, 7);
  EXPECT_TRUE(has(got, Errc::node_lost,
                  {"node " + std::to_string(forger.node_id()) + " sent another frame where the data of message 5 belongs"}))
      << got.to_string();
}

// ... and so does data of another length than its header says.
TEST(P2PWindowAcrossNodes, ANodeThatSendsDataOfAnotherLengthThanItsHeaderSaysHasItsLinkEnded) {
  TwoNodes two;
  ASSERT_TRUE(two.join());
  GlobalClient& forger = two.here();
  const uint32_t a = two.a->rank(), c = two.c->rank();
  static const int32_t values[2] = {42, 43};
  two.forge(FrameType::p2p_data, a, c, encode_p2p_header({a, c, 7, DType::i32, 1, Status::ok(), 9}));
  two.forge_body(9, values, sizeof values);
  Tensor t = Tensor::zeros(DType::i32, {1});
  const Status got = two.c->recv(t, a, 7);
  EXPECT_TRUE(has(got, Errc::node_lost,
                  {"node " + std::to_string(forger.node_id()) + " sent 8 bytes of data for message 9, whose header says i32[1]"}))
      << got.to_string();
  EXPECT_EQ(t.data_as<int32_t>()[0], 0);
}

TEST(P2PWindowAcrossNodes, ANodeThatSendsDataNoReceivePulledHasItsLinkEnded) {
  TwoNodes two;
  ASSERT_TRUE(two.join());
  GlobalClient& forger = two.here();
  const uint32_t a = two.a->rank();
  static const int32_t value = 42;
  two.forge_body(1, &value, sizeof value);
  Tensor t = Tensor::zeros(DType::i32, {1});
  const auto t0 = std::chrono::steady_clock::now();
  const Status got = two.c->recv(t, a, 7);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s) << "C waited out its timeout";
  EXPECT_TRUE(has(got, Errc::node_lost,
                  {"node " + std::to_string(forger.node_id()) +
                   " sent data for message 1, which no header announced and no receive here pulled"}))
      << got.to_string();
  EXPECT_EQ(t.data_as<int32_t>()[0], 0);
}

} // namespace
} // namespace chorus
