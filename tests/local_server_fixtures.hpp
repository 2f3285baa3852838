// What the local server tests share: builders for the messages and op requests a peer sends, and
// CoreTest, a LocalServerCore entered directly, so that every reply is checked synchronously and a
// request expires exactly when the test does what its waiter does past the deadline,
// core->on_timeout(reply->timer) (nothing depends on the clock). Every error check asserts the
// Errc AND that the message names the peers and values involved; on a mismatch every peer that
// joined the op gets the same Status, and the next op works.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <chorus/config.hpp>
#include "actors/local_server/call.hpp"
#include "actors/local_server/server_core.hpp"
#include "messages/peer_codec.hpp"
#include "status_matchers.hpp"

namespace chorus {
// Named, not anonymous: CoreTest must be one class wherever its suite's cases are (one program
// may hold them all: chorus-suites), as GoogleTest requires of a suite's fixture.
inline namespace local_server_fixtures {

using namespace std::chrono_literals;
using ms = std::chrono::milliseconds;

// ---------------------------------------------------------------- message builders

inline Config cfg(uint32_t n, int timeout_ms = 200, const char* strategy = "auto") {
  Config c;
  c.num_devices = n;
  c.with_local_strategy(*parse_strategy(strategy));
  c.timeout = ms(timeout_ms);
  return c;
}

inline TensorMeta meta(DType t, Shape s) { return {true, t, std::move(s)}; }
inline TensorMeta f32(int64_t n) { return meta(DType::f32, {n}); }
inline TensorMeta none() { return {}; }

// The registration generation the server handed out last (register replies carry it); ops and
// finishes carry it back, as a Peer handle does. Each fixture starts a fresh server at epoch 0.
inline std::atomic<uint64_t> g_epoch{0};
inline void note_epoch(const Reply& r) {
  if (r.status.is_ok() && r.epoch > g_epoch.load()) g_epoch = r.epoch;
}

inline Call register_call(uint32_t peer, const Config& c, uint32_t version = protocol_version()) {
  Call call;
  call.message = encode_register({version, peer, c});
  return call;
}
inline Call finish_call(uint32_t peer) {
  Call call;
  call.message = encode_peer_only(peer, false, g_epoch.load());
  return call;
}
inline Call reset_call(uint32_t peer) {
  Call call;
  call.message = encode_peer_only(peer, true);
  return call;
}

inline OpRequestData req(uint32_t peer, uint64_t seq, OpKind kind, TensorMeta in = {}, TensorMeta out = {},
                  ReduceOp op = ReduceOp::sum, uint32_t root = 0) {
  OpRequestData r;
  r.peer = peer;
  r.op.seq = seq;
  r.op.kind = kind;
  r.input = std::move(in);
  r.output = std::move(out);
  r.op.redop = op;
  r.op.root = static_cast<int>(root);
  return r;
}
inline OpRequestData all_reduce_req(uint32_t peer, uint64_t seq, int64_t n = 4, ReduceOp op = ReduceOp::sum) {
  return req(peer, seq, OpKind::all_reduce, f32(n), f32(n), op);
}
inline OpRequestData by_data(uint32_t peer, uint64_t seq, OpKind kind, TensorMeta in) {
  OpRequestData r = req(peer, seq, kind, std::move(in));
  r.root_from_data = true;
  return r;
}
inline OpRequestData p2p(OpKind kind, uint32_t peer, uint32_t other, TensorMeta t, uint64_t tag = 0) {
  OpRequestData r = kind == OpKind::send ? req(peer, 0, kind, std::move(t)) : req(peer, 0, kind, {}, std::move(t));
  r.other = other;
  r.tag = tag;
  return r;
}
// A send or receive carries a buffer of its size (zeros), as a peer's does: the core copies
// between the two when it pairs them (launch_pair).
inline Call op_call(OpRequestData r) {
  Call call;
  r.epoch = g_epoch.load();
  if (r.op.kind == OpKind::send && r.input.present) call.input = Tensor::zeros(r.input.dtype, r.input.shape);
  if (r.op.kind == OpKind::recv && r.output.present) call.output = Tensor::zeros(r.output.dtype, r.output.shape);
  call.request = std::move(r);
  return call;
}

inline bool is_done(const Reply& r) { return r.done.value.load() >= 1; }

// ---------------------------------------------------------------- LocalServerCore, entered directly

class CoreTest : public ::testing::Test {
 protected:
  CoreTest() { g_epoch = 0; }
  std::unique_ptr<LocalServerCore> core = std::make_unique<LocalServerCore>();

  Status reg(uint32_t peer, const Config& c, uint32_t version = protocol_version()) {
    Call call = register_call(peer, c, version);
    auto r = call.reply;
    core->on_register(std::move(call));
    EXPECT_TRUE(is_done(*r)) << "register must be answered at once";
    note_epoch(*r);
    return r->status;
  }
  void reg_all(const Config& c) {
    for (uint32_t p = 0; p < c.num_devices; ++p) ASSERT_TRUE(reg(p, c).is_ok()) << p;
  }
  Status finish(uint32_t peer) {
    Call call = finish_call(peer);
    auto r = call.reply;
    core->on_finish(std::move(call));
    EXPECT_TRUE(is_done(*r));
    return r->status;
  }
  Status reset(uint32_t peer) {
    Call call = reset_call(peer);
    auto r = call.reply;
    core->on_reset(std::move(call));
    EXPECT_TRUE(is_done(*r));
    return r->status;
  }
  std::shared_ptr<Reply> op(const OpRequestData& r) { return op(op_call(r)); }
  std::shared_ptr<Reply> op(Call call) {
    auto reply = call.reply;
    core->on_op(std::move(call));
    return reply;
  }
  // A send or receive whose buffer the test keeps: a send's holds `mark` in every element (f32).
  struct Half {
    std::shared_ptr<Reply> reply;
    Tensor buf;
    std::vector<float> values() const { return buf.to_vector<float>(); }
  };
  Half half(const OpRequestData& r, float mark = 0) {
    Call call = op_call(r);
    Tensor buf = r.op.kind == OpKind::send ? call.input : call.output;
    std::fill_n(buf.data_as<float>(), buf.numel(), mark);
    return {op(std::move(call)), buf};
  }
  // Submits one request per peer; every reply must be done once the last one arrived.
  std::vector<std::shared_ptr<Reply>> collective(const std::vector<OpRequestData>& reqs) {
    std::vector<std::shared_ptr<Reply>> replies;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      replies.push_back(op(reqs[i]));
      if (i + 1 < reqs.size()) {
        EXPECT_FALSE(is_done(*replies.back())) << "answered before every peer called";
      }
    }
    for (auto& r : replies) EXPECT_TRUE(is_done(*r));
    return replies;
  }
  // Every peer got the same error, with the op's label in front.
  void expect_all_failed(const std::vector<std::shared_ptr<Reply>>& replies, Errc code,
                         std::initializer_list<std::string> parts) {
    ASSERT_FALSE(replies.empty());
    EXPECT_TRUE(has(replies[0]->status, code, parts));
    for (auto& r : replies) {
      EXPECT_EQ(r->status, replies[0]->status) << r->status.to_string() << " vs " << replies[0]->status.to_string();
      EXPECT_EQ(r->plan, nullptr);
    }
  }
  void expect_all_planned(const std::vector<std::shared_ptr<Reply>>& replies) {
    for (std::size_t p = 0; p < replies.size(); ++p) {
      ASSERT_TRUE(replies[p]->status.is_ok()) << replies[p]->status.to_string();
      ASSERT_NE(replies[p]->plan, nullptr);
      EXPECT_EQ(replies[p]->rank, static_cast<int>(p));
      EXPECT_EQ(replies[p]->plan, replies[0]->plan) << "every peer runs the same plan";
    }
  }
  // The op after an error works: a correct all_reduce from everyone with sequence number `seq`.
  void expect_next_all_reduce_works(uint32_t n, uint64_t seq) {
    std::vector<OpRequestData> reqs;
    for (uint32_t p = 0; p < n; ++p) reqs.push_back(all_reduce_req(p, seq));
    auto replies = collective(reqs);
    expect_all_planned(replies);
    EXPECT_NE(replies[0]->timer, 0u) << "every waiting request carries the timer its waiter expires";
    for (auto& r : replies) EXPECT_EQ(r->timer, replies[0]->timer) << "one timer per op";
    if (HasFailure() || !replies[0]->plan) return;
    EXPECT_EQ(replies[0]->plan->kind(), OpKind::all_reduce);
    EXPECT_EQ(replies[0]->plan->count(), 4u);
    EXPECT_EQ(replies[0]->plan->label(), "all_reduce #" + std::to_string(seq));
    EXPECT_EQ(core->pending_ops(), 0u);
  }
  // Runs a mismatching collective of 3 peers and checks the shared error and the next op.
  void mismatch(const std::vector<OpRequestData>& reqs, Errc code, std::initializer_list<std::string> parts) {
    reg_all(cfg(static_cast<uint32_t>(reqs.size())));
    auto replies = collective(reqs);
    expect_all_failed(replies, code, parts);
    EXPECT_EQ(core->pending_ops(), 0u);
    expect_next_all_reduce_works(static_cast<uint32_t>(reqs.size()), reqs[0].op.seq + 1);
  }
};

} // namespace local_server_fixtures
} // namespace chorus
