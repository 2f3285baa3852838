// Where a Peer handle's ops run: every op, blocking or not, is a task on one of the handle's
// lanes (engine/lane.hpp). The collectives, groups and object collectives of a handle share its
// lane, so they start in call order; send and recv have a lane per (direction, other rank, tag),
// so an exchange of non-blocking sends and receives meets, and the FIFO order of one
// (source, destination, tag) holds. A blocking call on an idle lane runs on the caller's thread;
// the non-blocking form returns a Work at once.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>

#include <chorus/work.hpp>
#include "runtime/peer/peer_state.hpp"
#include "cuda/stream_calls.hpp"
#include "engine/lane.hpp"
#include "engine/work_state.hpp"

namespace chorus::peer_impl {

// Which lane an op takes.
struct LaneKey {
  enum Kind : uint8_t { ops, send, recv } kind = ops;
  uint32_t other = 0;  // send/recv: the other rank
  uint64_t tag = 0;
  static LaneKey collective() { return {}; }
  static LaneKey p2p(Kind k, uint32_t other, uint64_t tag) { return {k, other, tag}; }
};

// What an op does on the thread that runs it: its Status, and what it gives back (into the Work).
using OpBody = std::function<Status(WorkState&)>;

// An op ordered in a CUDA stream (OpOptions::stream): what was put on the stream at the call. The
// stream is let go on once, by release() or at the latest when this goes (an op that never ran,
// an exception on the way), so it never waits for ever.
struct StreamOrder {
  gpu::StreamCalls* calls = nullptr;  // set once the mark is on the stream
  gpu::StreamMark mark;
  StreamOrder() = default;
  StreamOrder(const StreamOrder&) = delete;
  StreamOrder& operator=(const StreamOrder&) = delete;
  ~StreamOrder();
  void release();
};

// Runs `body` with `o` in force and completes `w` with its Status (the lanes' tasks); an exception
// becomes Errc::internal. With `order`, the body waits for the stream's earlier work first, and the
// stream is let go on once it is done.
void run_body(const PeerState* s, const OpBody& body, const OpOptions& o, WorkState& w,
              StreamOrder* order = nullptr);
// An error where this thread runs the callbacks of a Work of `s` (ops of `s` are refused there).
Status called_from_callback(const PeerState* s);

// What an op does at its call, under its lane's lock, in the same step that takes its place in
// the lane (a send or receive posting itself: posted_op.hpp), so that a lane's order is their
// order. True where that left nothing to wait for (a pair copied as it was paired, or an error):
// its body then runs on the caller's thread at once, as no task on its lane.
using OpEntry = std::function<bool()>;

// Hands `body` to its lane and waits for it; the blocking forms go through here when the lane is
// busy. `enter`, when given, runs as the body is handed in (or in its stead, where it says the op
// is done: the body then runs here).
Status wait_in_lane(const std::shared_ptr<PeerState>& s, LaneKey k, const OpBody& body, WorkState& w,
                    const OpEntry& enter = {});

// Takes the lane for this thread where it is free (the blocking fast path); else empty. `enter`,
// when given, runs where it takes it.
Lane::Hold enter_lane(PeerState& s, LaneKey k, const OpEntry& enter = {});

// Blocking: `body` (any callable Status(WorkState&), taken by reference: the caller waits) on this
// thread where its lane is free, else after what is queued there. `w` gets what it gives back.
template <class F>
Status run_now(const std::shared_ptr<PeerState>& s, LaneKey k, F&& body, WorkState& w) {
  if (!s) return Status(Errc::not_registered, "this Peer handle was never registered");
  if (!s->lanes_used.load(std::memory_order_acquire)) return body(w);  // no op was ever queued
  if (auto e = called_from_callback(s.get()); !e) return e;
  if (auto hold = enter_lane(*s, k)) return body(w);
  return wait_in_lane(s, k, OpBody([&body](WorkState& ws) { return body(ws); }), w);
}
template <class F>
Status run_now(const std::shared_ptr<PeerState>& s, LaneKey k, F&& body) {
  WorkState w;
  return run_now(s, k, std::forward<F>(body), w);
}
// run_now, once the handle has used lanes, with an entry step made at the call: `enter` (an
// OpEntry) runs in the step that takes the lane or hands the body in.
template <class E, class F>
Status run_now_entered(const std::shared_ptr<PeerState>& s, LaneKey k, E&& enter, F&& body) {
  if (!s) return Status(Errc::not_registered, "this Peer handle was never registered");
  WorkState w;
  if (auto e = called_from_callback(s.get()); !e) return e;
  const OpEntry entry([&enter] { return enter(); });
  if (auto hold = enter_lane(*s, k, entry)) return body(w);
  return wait_in_lane(s, k, OpBody([&body](WorkState& ws) { return body(ws); }), w, entry);
}

// A blocking call whose body returns its own result R (a Status or a Result<T>): `f()` runs on the
// handle's lane (as run_now), after the ops handed in before it.
template <class R, class F>
R in_lane(const std::shared_ptr<PeerState>& s, F&& f) {
  std::optional<R> out;
  Status st = run_now(s, LaneKey::collective(), [&](WorkState&) {
    out.emplace(f());
    if constexpr (std::is_same_v<R, Status>) return *out;
    else return out->status();
  });
  if (!out) return st;  // it never ran: the handle was never registered
  return std::move(*out);
}

// Waits until every send and recv of `s` handed in before now is done (finish, destroy). Refused
// from a callback of one of its Works (invalid_argument): the wait would be for the lane that runs
// the callback. A null `s` has nothing to wait for.
Status wait_for_p2p(PeerState* s);

// Non-blocking: `body` (which owns copies of what it needs) after what is queued on its lane;
// `enter`, when given, runs at the call as the body is handed in, or in its stead where it says
// the op is done: the body then runs at once, and the Work returned is complete.
Work run_async(const std::shared_ptr<PeerState>& s, LaneKey k, const OpOptions& o, OpBody body,
               const OpEntry& enter = {});

} // namespace chorus::peer_impl
