// What a Runtime owns, visible to the files that talk to CAF. Host apps never include this.
#pragma once
#include <caf/all.hpp>

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include <chorus/config.hpp>
#include <chorus/peer.hpp>
#include <chorus/runtime.hpp>
#include "actors/local_server/local_server.hpp"
#include "actors/local_server/server_core.hpp"

namespace chorus {

class GlobalClient;

struct RuntimeImpl {
  RuntimeImpl();
  ~RuntimeImpl();
  // Stops the actors and closes the server's core: peers still holding handles get an error at
  // once instead of waiting out their timeout. Idempotent.
  void shutdown();

  // Sends one control message to the local server and waits for its reply slot; the wait gives up
  // `grace` after the op's own timeout so that a vanished server cannot hang the caller.
  template <class Atom>
  Status submit(Atom atom, Call& call, std::chrono::milliseconds timeout) {
    auto reply = call.reply;
    if (auto why = core->closed()) return *why;  // the server is going away: do not wait on it
    caf::anon_send(server, atom, std::move(call));
    if (!reply->done.wait_at_least(1, Clock::now() + timeout + grace))
      return {Errc::timeout, "the local server did not answer within " +
                                 std::to_string((timeout + grace).count()) + " ms"};
    return reply->status;
  }

  // Enters the local server's core directly with an op request (no mailbox hop, no thread wake)
  // and waits for the reply; when the deadline passes, expires the request itself.
  // `peers` threads take part in the op (it decides whether waiting may spin).
  Status submit_op(Call& call, std::chrono::milliseconds timeout, unsigned peers);
  // The same for a group request (creation waits for every member).
  Status submit_group(Call& call, std::chrono::milliseconds timeout, unsigned peers);

  // Multi-node mode: starts the global client on the first registration (every later one reuses it).
  Status ensure_global(const Config& config);

  // Multi-node group ids, unique in the job whatever the leader: the k-th group (k from 0) that
  // the leader (a global rank below `total`) creates gets 1 + leader + k x total, so no two
  // leaders' ids meet and 0 stays the world's. Ids are 32-bit (they travel in every frame);
  // nullopt once this leader's next one would not fit, never an id that is taken.
  static std::optional<uint32_t> group_id(uint32_t leader, uint32_t total, uint64_t k) {
    const uint64_t id = 1 + uint64_t{leader} + k * total;
    if (leader >= total || id > UINT32_MAX) return std::nullopt;
    return static_cast<uint32_t>(id);
  }
  std::optional<uint32_t> next_group_id(uint32_t leader, uint32_t total) {
    std::lock_guard<std::mutex> lk(global_mu);
    auto id = group_id(leader, total, group_counter[leader]);
    if (id) ++group_counter[leader];
    return id;
  }
  std::map<uint32_t, uint64_t> group_counter;  // by leader of this process: the groups it created

  static constexpr std::chrono::milliseconds grace{5000};
  std::mutex global_mu;
  std::shared_ptr<GlobalClient> global;  // multi-node mode only
  std::shared_ptr<LocalServerCore> core;
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> system;
  caf::actor server;
  std::mutex owned_mu;
  std::vector<caf::actor> owned;  // peer actors spawned for the host app; stopped with the runtime
};

struct PeerState {
  std::shared_ptr<RuntimeImpl> rt;
  PeerId id = 0;
  Config config;
  std::atomic<uint64_t> seq{0};  // this peer's collective sequence number: the op identity
  uint64_t epoch = 0;   // the registration generation the server handed out (see reset)
  bool finished = false;
  uint32_t group = 0;              // 0: the world
  std::vector<uint32_t> members;   // global ids of the group; rank i is members[i]
  uint32_t rank = 0;               // this peer's index in members
  uint32_t offset = 0;             // multi-node: the global rank of this node's first peer
  std::shared_ptr<GlobalClient> global;  // multi-node mode only
  bool destroyed = false;          // destroy() was called on this group handle
  RunStrategy last_strategy;       // what ran this handle's last op (Peer::last_strategy)
};

// The library's way into the public handles (their internals are private to host apps).
struct PeerAccess {
  static Peer make(std::shared_ptr<PeerState> s) { return Peer(std::move(s)); }
};
struct RuntimeAccess {
  static RuntimeImpl& impl(Runtime& r) { return *r.impl_; }
};

} // namespace chorus
