// What a Runtime owns, visible to the files that talk to CAF. Host apps never include this.
#pragma once
#include <caf/all.hpp>

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <vector>

#include <chorus/config.hpp>
#include <chorus/peer.hpp>
#include <chorus/runtime.hpp>
#include "actors/local_server/local_server.hpp"
#include "actors/orchestrator/hosted.hpp"
#include "actors/local_server/server_core.hpp"
#include "runtime/peer/peer_state.hpp"
#include "messages/node_codec.hpp"

namespace chorus {

class FlightRecorder;
class GlobalClient;
class Trace;

struct RuntimeImpl : std::enable_shared_from_this<RuntimeImpl> {
  // Runs its own actor system (the `sharing` scheduler: see runtime.cpp), made on first use.
  RuntimeImpl();
  // Runs in the host app's actor system, which must outlive this runtime's shutdown().
  explicit RuntimeImpl(caf::actor_system& host);
  ~RuntimeImpl();
  // Stops the actors and closes the server's core (a successor's first: see `next`): peers still
  // holding handles get an error at once instead of waiting out their timeout. In the host's system it waits (up to `grace`)
  // until every actor it spawned there is gone, since the host's ~actor_system waits for them.
  // Then writes the trace, if there is one. Idempotent.
  void shutdown();

  // The actor system the runtime runs in, with its local server. In the runtime's own mode it is
  // made on first use: with remoting when `config` is multi-node (CAF's middleman, its heartbeats
  // and TLS must be set before a system starts, so the first multi-node use decides), plain
  // otherwise. An error when `config` needs remoting that the system in place lacks. One per
  // process: the node actor of multi-node mode runs in it too.
  Result<caf::actor_system*> system_for(const Config* config);
  // The same for callers that hold the Runtime (so it is not shut down): never fails then.
  caf::actor_system& system() {
    auto s = system_for(nullptr);
    if (!s) throw std::logic_error("chorus: the runtime's actor system is gone: " + s.status().to_string());
    return **s;
  }
  bool has_system() {
    std::lock_guard<std::mutex> lk(system_mu);
    return sys != nullptr;
  }

  // Registers peer `id` and waits for the answer (Runtime::register_peer; peer actors call it on
  // their own threads).
  Result<Peer> register_peer(PeerId id, const Config& config);

  // Takes `a` (an actor spawned for the host app) into the set stopped by shutdown(); it leaves
  // the set when it exits. Returns false, and stops `a`, once the runtime is shut down.
  bool own(const caf::actor& a);

  // Sends one control message to the local server and waits for its reply slot; the wait gives up
  // `grace` after the op's own timeout so that a vanished server cannot hang the caller.
  template <class Atom>
  Status submit(Atom atom, Call& call, std::chrono::milliseconds timeout) {
    return hand_over(call, timeout, [atom](const local_server_actor& to, Call c) { caf::anon_send(to, atom, std::move(c)); });
  }

  // The same for a request the core answers at once, under its own lock (a registration): entered
  // directly, without the mailbox hop, which cost a shrink up to 3 ms on a loaded host.
  template <class Enter>
  Status enter(Enter on, Call& call, std::chrono::milliseconds timeout) {
    return hand_over(call, timeout, [this, on](const local_server_actor&, Call c) { ((*core).*on)(std::move(c)); });
  }

  // submit() and enter(): `give(server, call)` hands the call over, unless the server is going
  // away (do not wait on it) or gone with the runtime; then waits for the reply slot.
  template <class Give>
  Status hand_over(Call& call, std::chrono::milliseconds timeout, Give give) {
    auto reply = call.reply;
    if (auto why = core->closed()) return *why;
    local_server_actor to;
    {
      std::lock_guard<std::mutex> lk(actors_mu);  // shutdown() drops the handle
      to = server;
    }
    if (!to) return core->closed().value_or(Status(Errc::reset, "the runtime has been destroyed"));
    give(to, std::move(call));
    if (!reply->done.wait_at_least(1, Clock::now() + timeout + grace))
      return {Errc::timeout, "the local server did not answer within " +
                                 std::to_string((timeout + grace).count()) + " ms"};
    return reply->status;
  }

  // Waits for the reply to an op request that entered the local server's core directly
  // (core->on_op: no mailbox hop, no thread wake; peer_impl::enter_request); when the deadline
  // passes, expires the request itself. `peers` threads take part in the op (it decides whether
  // waiting may spin). The timeout counts from `start`, when the op began (it may have waited in
  // the arena before).
  Status await_op(const std::shared_ptr<Reply>& reply, std::chrono::milliseconds timeout, unsigned peers,
                  Clock::time_point start);
  // Enters a group request (create or destroy) and waits for the reply, as await_op does.
  Status submit_group(Call& call, std::chrono::milliseconds timeout, unsigned peers);

  // Multi-node mode: starts the global client on the first registration (every later one reuses
  // it, or gets the first one's error).
  Status ensure_global(const Config& config);
  // The join itself: finds the orchestrator (hosts it, when the config says so, or reads rank 0's
  // rendezvous file), then starts the global client.
  Result<std::shared_ptr<GlobalClient>> join_collective(const Config& config, caf::actor_system& sys);
  void drop_hosted_orchestrator();  // and its rendezvous file; outside every lock

  // Elastic membership (runtime/peer/elastic.cpp). After a shrink or a grow the node runs on as a
  // successor: a runtime of its own in this one's actor system, whose join presents `rejoin`
  // (the member this node was). The first local peer that asks makes it; this one is then
  // retired: its ops end with `why`, its connections close, and its actors stop, while its actor
  // system, recorder, trace and any orchestrator it hosts live on for the successors. Under
  // global_mu; a successor is shut down before the runtime it follows.
  std::shared_ptr<RuntimeImpl> next;
  RejoinData rejoin;
  // Each local peer's world handle in `next`, once it joined there (by local id): a second shrink
  // of the same world returns it again, and a group's shrink finds its world's new epoch here.
  // Dropped when `next` is retired in turn (its connections go with its last handle, while this
  // runtime stays); `successors_gone` says so. `prev`: the runtime this one follows.
  std::map<PeerId, std::shared_ptr<PeerState>> successors;
  bool successors_gone = false;
  std::weak_ptr<RuntimeImpl> prev;
  bool no_next = false;  // shutdown() has begun: no successor may be made any more
  void retire(const Status& why);

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
  std::shared_ptr<GlobalClient> global;  // multi-node mode only, once joined
  // The orchestrator this process hosts (Config::host_orchestrator), and the rendezvous file it
  // wrote ("": none); both go when the Runtime does. Under global_mu.
  std::unique_ptr<HostedOrchestrator> hosted;
  std::string rendezvous_written;
  // Multi-node: the node joins once, for its first registration; every other registration waits
  // for that outcome and gets it too (a failed join fails them all alike; a new Runtime may try
  // again). Under global_mu, but the join itself runs outside it.
  bool joining = false;
  std::optional<Status> join_outcome;
  std::optional<bool> multi_node;  // fixed by the first registration (register_peer)
  WaitWord joined;  // 1 once join_outcome is set
  // The process's flight recorder, made by the first registration (Config::flight_recorder; null:
  // none); every peer handle shares it. Under global_mu until made, then fixed.
  std::shared_ptr<FlightRecorder> flight;
  // The process's trace (CHORUS_TRACE, Config::trace_file; null: none), made and fixed like the
  // recorder; each peer handle points at its local peer's part. shutdown() writes it.
  std::shared_ptr<Trace> trace;
  // One process's arena (runtime/peer/arena_path.hpp), for the peers of registration generation
  // `arena_epoch`; made by its first registration, closed by a reset or shutdown (a peer of an
  // older generation then takes the ordinary path, which refuses it). Under global_mu.
  std::shared_ptr<ArenaSeat> arena;
  uint64_t arena_epoch = 0;
  std::shared_ptr<ArenaSeat> arena_for(uint64_t epoch, uint32_t peers);
  void close_arena();
  std::shared_ptr<LocalServerCore> core;
  std::mutex system_mu;  // guards the three fields below (system_for); taken before actors_mu
  std::unique_ptr<caf::actor_system_config> cfg;  // of own_system
  std::unique_ptr<caf::actor_system> own_system;  // empty in the host's system
  caf::actor_system* sys = nullptr;               // own_system or the host's; null until first use
  const bool in_host = false;                     // runs in the host app's actor system
  std::mutex actors_mu;  // guards the three fields below; never held across a call out
  local_server_actor server;  // dropped by shutdown()
  std::map<caf::actor_id, caf::actor> owned;  // peer actors spawned for the host app
  bool stopped = false;                       // shutdown() has begun
};

// The library's way into the public handle (its internals are private to host apps).
struct RuntimeAccess {
  static RuntimeImpl& impl(Runtime& r) { return *r.impl_; }
};

} // namespace chorus
