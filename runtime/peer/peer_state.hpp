// What a Peer handle holds: its registration (shared with every handle of the same peer), the
// group it runs ops in and its rank there, and the sequence number that names its next op.
// Host apps never see it (Peer keeps it behind a pointer).
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include <chorus/config.hpp>
#include <chorus/peer.hpp>

#include "engine/lane.hpp"
#include "strategies/arena.hpp"
#include "strategies/tuning.hpp"

namespace chorus {

struct RuntimeImpl;

class GlobalClient;
class FlightRecorder;
class PeerTrace;

struct PeerState {
  std::shared_ptr<RuntimeImpl> rt;
  PeerId id = 0;
  Config config;
  std::atomic<uint64_t> seq{0};  // this peer's collective sequence number: the op identity
  uint64_t epoch = 0;   // the registration generation the server handed out (see reset)
  std::atomic<bool> finished{false};  // atomic: a send/recv lane reads it beside the ops lane
  uint32_t group = 0;              // 0: the world
  std::vector<uint32_t> members;   // global ids of the group; rank i is members[i]
  uint32_t rank = 0;               // this peer's index in members
  uint32_t offset = 0;             // multi-node: the global rank of this node's first peer
  std::shared_ptr<GlobalClient> global;  // multi-node mode only
  std::atomic<bool> destroyed{false};  // destroy() was called on this group handle
  // What ran this handle's last op (Peer::last_strategy), pack()ed: calls of one handle may
  // overlap (send/recv from several threads), and each sets it.
  std::atomic<uint64_t> last_strategy{pack(RunStrategy{})};
  std::shared_ptr<FlightRecorder> flight;  // the process's recorder (null: none)
  PeerTrace* trace = nullptr;      // this local peer's part of the process's trace (null: none)
  std::shared_ptr<ArenaSeat> arena;  // the world's small ops meet here first (null: none)
  // Where this handle's ops run (runtime/peer/op_lanes.hpp): its collectives in call order, and
  // send/recv per (is send, other rank, tag), made on first use under p2p_mu.
  Lane ops_lane;
  // Set by the first non-blocking op of the handle, never cleared. Until then a blocking call runs
  // on its caller's thread without taking a lane (as before there were lanes): nothing can be
  // queued ahead of it, and calls of several threads at once were never ordered.
  std::atomic<bool> lanes_used{false};
  using P2pKey = std::tuple<bool, uint32_t, uint64_t>;
  std::mutex p2p_mu;
  std::map<P2pKey, std::unique_ptr<Lane>> p2p_lanes;
  // Under p2p_mu: per send/recv lane, the ops queued or running there that enter the server in
  // their body (runtime/peer/peer.cpp, P2pCall): later ones of the lane must not overtake them.
  std::map<P2pKey, uint32_t> late_ops;
};

// The library's way into the public handle (its internals are private to host apps).
struct PeerAccess {
  static Peer make(std::shared_ptr<PeerState> s) { return Peer(std::move(s)); }
  static const std::shared_ptr<PeerState>& state(const Peer& p) { return p.state_; }
};

} // namespace chorus
