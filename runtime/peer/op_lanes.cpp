#include "runtime/peer/op_lanes.hpp"

#include <exception>
#include <string>
#include <utility>

#include "runtime/peer/run_op.hpp"
#include "cuda/device_status.hpp"
#include "cuda/stream_calls.hpp"

namespace chorus::peer_impl {

namespace {
// OpOptions::timeout of the op this thread runs (zero: none given). An op runs wholly on the
// thread that took it from its lane, so a thread's value is its op's.
thread_local std::chrono::milliseconds tl_op_timeout{0};
// Why the op this thread runs could not start (its stream's earlier work did not finish in time);
// ok: it could.
thread_local Status tl_start_failure;

struct StartFailureScope {
  Status before;
  explicit StartFailureScope(Status now) : before(std::exchange(tl_start_failure, std::move(now))) {}
  ~StartFailureScope() { tl_start_failure = std::move(before); }
};
// The handle whose Work this thread is completing (running its callbacks), if any.
thread_local const PeerState* tl_completing = nullptr;

// The send/recv lanes kept at most before idle ones are dropped (a tag per message would make
// one each).
constexpr std::size_t kKeptP2pLanes = 64;

// Under s.p2p_mu: the lane of `k`, made on first use.
Lane& p2p_lane(PeerState& s, LaneKey k) {
  const PeerState::P2pKey key{k.kind == LaneKey::send, k.other, k.tag};
  auto it = s.p2p_lanes.find(key);
  if (it != s.p2p_lanes.end()) return *it->second;
  if (s.p2p_lanes.size() >= kKeptP2pLanes)
    std::erase_if(s.p2p_lanes, [](const auto& kv) { return kv.second->idle(); });
  return *s.p2p_lanes.emplace(key, std::make_unique<Lane>()).first->second;
}

// Enters or hands in, as one step under the table's lock for send/recv lanes, so a lane is never
// dropped between being found and being used (an op of the same key would then run beside it).
// `step` gets its lane by calling `lane()`: a send/recv lane is found (or made) only where asked,
// so an op done at its entry makes none.
template <class Step>
auto on_lane(PeerState& s, LaneKey k, Step&& step) {
  if (k.kind == LaneKey::ops) return step([&s]() -> Lane& { return s.ops_lane; });
  std::lock_guard<std::mutex> lk(s.p2p_mu);
  return step([&s, k]() -> Lane& { return p2p_lane(s, k); });
}
} // namespace

OpTimeoutScope::OpTimeoutScope(std::chrono::milliseconds t) : before_(tl_op_timeout) {
  if (t.count() > 0) tl_op_timeout = t;
}
OpTimeoutScope::~OpTimeoutScope() { tl_op_timeout = before_; }

std::chrono::milliseconds op_timeout(const PeerState& s) {
  return tl_op_timeout.count() > 0 ? tl_op_timeout : s.config.timeout;
}

bool op_timeout_given() { return tl_op_timeout.count() > 0; }

void run_body(const PeerState* s, const OpBody& body, const OpOptions& o, WorkState& w, StreamOrder* order) {
  Status st;
  try {
    OpTimeoutScope scope(o.timeout);
    // A stream's earlier work not done in time: the op still takes its place (failing it for
    // every peer, with this cause), so that the handle's ops stay aligned with the others'.
    Status not_started;
    if (order) not_started = order->calls->wait_started(order->mark, Clock::now() + op_timeout(*s));
    StartFailureScope failure(not_started);
    st = body(w);
    if (!not_started.is_ok() && st.is_ok()) st = not_started;  // an op that needed no other peer
  } catch (const std::exception& e) {  // on a lane's thread nobody else would catch it
    st = Status(Errc::internal, std::string("the op threw: ") + e.what());
  } catch (...) {
    st = Status(Errc::internal, "the op threw something other than a std::exception");
  }
  if (order) order->release();  // the stream goes on, whatever the outcome, before anyone hears
  // The callbacks run here: an op of this handle called from one would take a place among its
  // ops that depends on timing (ahead of or behind ops handed in meanwhile), so it is refused.
  const PeerState* before = tl_completing;
  tl_completing = s;
  w.complete(std::move(st));
  tl_completing = before;
}

Status start_failure() { return tl_start_failure; }

StreamOrder::~StreamOrder() { release(); }

void StreamOrder::release() {
  if (calls) std::exchange(calls, nullptr)->release(mark);
}

Status called_from_callback(const PeerState* s) {
  if (s && tl_completing == s)
    return {Errc::invalid_argument, "an op of a handle called from a callback of one of its own Works (on_complete): "
                                    "its place among the handle's ops would depend on timing"};
  return Status::ok();
}

Lane::Hold enter_lane(PeerState& s, LaneKey k, const OpEntry& enter) {
  return on_lane(s, k, [&](auto lane) {
    Lane::Hold hold = lane().enter();
    if (hold && enter) enter();
    return hold;
  });
}

Status wait_in_lane(const std::shared_ptr<PeerState>& s, LaneKey k, const OpBody& body, WorkState& w,
                    const OpEntry& enter) {
  // The task fills its own state (the caller's `w` may be waited on from here only).
  auto ws = std::make_shared<WorkState>();
  const bool done = on_lane(*s, k, [&](auto lane) {
    if (enter && enter()) return true;
    lane().submit([s, ws, &body] { run_body(s.get(), body, OpOptions{}, *ws); });
    return false;
  });
  if (done) return body(w);  // nothing ahead to wait for: its partner already came
  Status st = WorkAccess::make(ws).wait();
  w.tensors = std::move(ws->tensors);
  w.objects = std::move(ws->objects);
  return st;
}

Work run_async(const std::shared_ptr<PeerState>& s, LaneKey k, const OpOptions& o, OpBody body, const OpEntry& enter) {
  if (!s) return WorkAccess::done(no_peer());
  if (auto e = called_from_callback(s.get()); !e) return WorkAccess::done(std::move(e));
  if (o.timeout.count() < 0) return WorkAccess::done(Status(Errc::invalid_argument, "OpOptions::timeout is negative"));
  std::shared_ptr<StreamOrder> order;
  if (o.stream) {
    gpu::StreamCalls* calls = gpu::stream_calls();
    if (!calls)
      return WorkAccess::done(gpu::device_error("OpOptions::stream: chorus was built without CUDA, so it cannot "
                                                "order an op in a CUDA stream"));
    order = std::make_shared<StreamOrder>();
    if (Status e = calls->enqueue(o.stream, order->mark); !e.is_ok()) return WorkAccess::done(std::move(e));
    order->calls = calls;  // from here on the stream is let go on however this call ends
  }
  auto ws = std::make_shared<WorkState>();
  s->lanes_used.store(true, std::memory_order_release);
  // Done at its entry (its partner came first, and they were copied as they paired): its body only
  // concludes it, here, and no thread of its lane is woken for it. Ops ahead on its lane have
  // paired already (the server pairs in lane order), so this overtakes none of them.
  const bool done = on_lane(*s, k, [&](auto get) {
    if (enter && enter()) return true;
    Lane& lane = get();
    ws->run_here = lane.runner(ws.get());
    ws->hurry = lane.hurrier(ws.get());
    lane.submit([s, ws, o, order, body = std::move(body)] { run_body(s.get(), body, o, *ws, order.get()); }, ws.get());
    return false;
  });
  if (done) run_body(s.get(), body, o, *ws, order.get());
  return WorkAccess::make(ws);
}

Status wait_for_p2p(PeerState* s) {
  if (auto e = called_from_callback(s); !e) return e;
  if (!s || !s->lanes_used.load(std::memory_order_acquire)) return Status::ok();  // no send/recv was ever queued
  std::vector<std::shared_ptr<WorkState>> marks;
  {
    std::lock_guard<std::mutex> lk(s->p2p_mu);
    for (auto& [key, lane] : s->p2p_lanes) {
      auto mark = std::make_shared<WorkState>();
      lane->submit([mark] { mark->complete(Status::ok()); });
      marks.push_back(std::move(mark));
    }
  }
  for (auto& m : marks) (void)WorkAccess::make(m).wait();  // each op ahead is bounded by its timeout
  return Status::ok();
}

} // namespace chorus::peer_impl
