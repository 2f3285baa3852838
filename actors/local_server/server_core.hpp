// The local server's logic, free of actor code: registration, matching the calls of one op by
// (group, sequence number), agreement checks, timeouts, and handing each peer its plan. The CAF
// actor in local_server.cpp feeds it control messages; peer threads of this process enter it
// directly with their op requests (a mailbox hop would cost a thread wake-up per op), so every
// entry point takes the core's lock.
// One class, its members in files of one job each: lifecycle.cpp (register, finish, reset,
// close), groups.cpp, op_matching.cpp (collectives and send/recv pairs), launch_local.cpp (host
// schedules and GPU runs of this process), launch_global.cpp (multi-node ops), timeouts.cpp (what
// ends a wait early: a request's deadline, or a lost node).
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <tuple>
#include <vector>

#include <chorus/config.hpp>
#include "actors/local_server/call.hpp"
#include "actors/local_server/op_validation.hpp"
#include "core/log.hpp"
#include "messages/peer_codec.hpp"
#include "strategies/tuning.hpp"

namespace chorus {

class GlobalClient;

// Multi-node mode needs the core owned by a shared_ptr (the Runtime's is): the global client
// reaches it through a weak reference when a node is lost (set_global).
class LocalServerCore : public std::enable_shared_from_this<LocalServerCore> {
 public:
  LocalServerCore() = default;
  ~LocalServerCore();

  void on_register(Call call);
  void on_finish(Call call);
  void on_reset(Call call);
  void on_op(Call call);
  void on_group(Call call);
  // Expires the request that waits under `key` (its Reply::timer): whoever waits on a reply calls
  // it once its deadline passes. It fails the op, group or send/recv half for everyone who came,
  // naming who did not; a key whose request was answered meanwhile is ignored. `bound` is the
  // waiter's timeout, which the error names (an op may have one of its own: OpOptions::timeout);
  // none: the config's.
  void on_timeout(uint64_t key, std::optional<std::chrono::milliseconds> bound = std::nullopt);
  // Takes back the send/recv half waiting under `key` without answering it: a receive from any
  // source across nodes that took a message from another node. False: it was paired (or expired)
  // already, and its reply is (being) answered.
  bool withdraw(uint64_t key);
  // Half the timeout of the request waiting with timer `key` gone: returns the warning, who waits
  // for whom ("all_reduce #7: rank 0 waits for ranks 1-2 (not called yet)") and where (`where`:
  // node, group, op), and in multi-node mode tells the op's other nodes which of its ranks here
  // have not called (GlobalClient::tell_stragglers). Once per op or group: its peers all wait on
  // one timer, and each asks; "" after the first, and when it waits no more or is not an op or
  // group request.
  std::string at_half_time(uint64_t key, LogWhere& where);
  // The same for collective (group, seq) as the status report words it ("peers 3, 4 of this node
  // (not called yet)"), or "" when it does not wait here (not pending, launched, or failed).
  std::string op_waits_for(uint32_t group, uint64_t seq) const;
  // Multi-node mode: registers group `gid` (members: global ids, by rank) on this node once its
  // members agreed (Peer::new_group). Idempotent: each local member calls it.
  void adopt_group(uint32_t gid, const std::vector<uint32_t>& members);
  // Also asks `g` to tell on_node_lost the first node loss it learns of, and
  // on_never_launched_elsewhere other nodes' never-launched notes (timeouts.cpp).
  void set_global(std::shared_ptr<GlobalClient> g);
  // Multi-node mode: another node never launched collective (group, seq) (its own peers timed out
  // before they all called: `why`, in the words of every node's deadline). The op cannot succeed:
  // where this node's peers wait for each other in it, they fail with `why` at once (true: it will
  // never launch here); where none called it yet, the first that does fails so, and its node-mates
  // too (false; the note is kept for the last kNotedNever ops so noted).
  bool on_never_launched_elsewhere(uint32_t group, uint64_t seq, const Status& why);
  // Whether such a note of collective (group, seq) waits for this node's first call (for tests).
  bool keeps_note(uint32_t group, uint64_t seq) const {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& [key, why] : noted_never_)
      if (key == OpKey{group, seq}) return true;
    return false;
  }
  // A node was lost (`why` is the global client's first loss, "node K lost: ..."): every collective
  // waiting here for this node's own peers fails with it at once, and so does every later one, at
  // its first local peer. Send/recv pairs within the node go on. Idempotent; the first loss stays.
  void on_node_lost(const Status& why);
  // Fails everything in flight with `why` and answers every later request with it.
  void close(Status why);
  std::optional<Status> closed() const {
    std::lock_guard<std::mutex> lk(mu_);
    return closed_;
  }

  std::size_t pending_ops() const {
    std::lock_guard<std::mutex> lk(mu_);
    return ops_.size();
  }

  // Tests: called where an op whose peers have all called is launched, right before the work that
  // must not run under the core's lock: "host" (the plan), "device" (make_device_run), "pair"
  // (a send/recv pair's plan or device run), "global" (GlobalClient::begin_op). Set it before
  // any op.
  using LaunchHook = std::function<void(std::string_view stage)>;
  void set_launch_hook(LaunchHook hook) { launch_hook_ = std::move(hook); }
  // Tests: called by on_op once the core has taken an op request in (it waits for the others,
  // was launched, or was answered), after unlocking, so a test can act on a call it knows waits
  // in the server. Set it before any op.
  using EnterHook = std::function<void()>;
  void set_enter_hook(EnterHook hook) { enter_hook_ = std::move(hook); }
  // Tests: whether the core's lock is free now. Call it from a thread that is not inside the core
  // (a thread must not try to lock a mutex it holds).
  bool lock_is_free() const {
    if (!mu_.try_lock()) return false;
    mu_.unlock();
    return true;
  }

 private:
  struct Arrival {
    OpRequestData req;
    Call call;
  };
  struct PendingOp {
    std::vector<std::optional<Arrival>> arrivals;  // by rank
    int arrived = 0;
    int answered = 0;
    bool failed = false;  // a tombstone: late peers get `failure` at once
    Status failure;
    OpKind kind = OpKind::barrier;
    uint64_t timer = 0;
    bool warned = false;  // at_half_time said it (once for all its peers)
  };
  using P2PKey = std::tuple<uint32_t, uint32_t, uint32_t, uint64_t>;  // group, source, destination, tag
  using OpKey = std::pair<uint32_t, uint64_t>;                         // group, sequence number
  struct Group {
    std::vector<uint32_t> members;  // global peer ids; rank i is members[i]
    std::vector<bool> released;     // destroyed by that member
  };
  struct PendingGroup {
    std::map<uint32_t, Call> arrivals;  // by global peer id
    uint64_t timer = 0;
    bool warned = false;  // as PendingOp's
  };
  struct P2PHalf {
    Arrival arrival;
    uint64_t timer;
  };

  // An op whose peers have all called, taken out of ops_ under the lock with what its launch
  // needs, and launched after unlocking (launch_local.cpp, launch_global.cpp).
  struct Launch {
    OpKey key;
    OpKind kind = OpKind::barrier;
    std::vector<std::optional<Arrival>> arrivals;  // every one present
    std::shared_ptr<const Config> config;
    uint64_t generation = 0;                // epoch_ then: the configuration's identity (schedule cache)
    Status status;                          // the first error a peer brought, or a disagreement
    OpShape shape{};                        // what the peers agreed on, when status is ok
    bool gpu = false;                       // GPU tensors: a device run
    RunStrategy strategy;                   // host schedules of one process: what the tuning module picked
    std::shared_ptr<const CompiledSchedule> schedule;  // ...and its schedule, when cached already
    std::shared_ptr<GlobalClient> global;   // multi-node: the op runs through it
    std::vector<uint32_t> members;          // multi-node: the group's members (empty: the world)
    int n = 0;                              // peers of the op (over every node in multi-node mode)
  };
  // A matched send/recv pair, launched after unlocking.
  struct PairLaunch {
    P2PKey key;
    Arrival snd, rcv;
    std::shared_ptr<const Config> config;
  };
  // What an op request leaves to do once the lock is released (at most one launch).
  struct Effects {
    std::optional<Launch> op;
    std::optional<PairLaunch> pair;
    // An op that will never launch here (another node's note): out of the global table, through
    // the client as it was under the lock (close() may clear global_ once it is released).
    std::optional<std::pair<uint32_t, uint64_t>> never;
    std::shared_ptr<GlobalClient> never_global;
  };

  // A control message that does not decode.
  static Status garbled(const std::string& err) { return {Errc::invalid_argument, err}; }
  Status check_caller(uint32_t peer, uint64_t epoch) const;
  // Matching, under the lock (op_matching.cpp). n: the arrivals to wait for (the group's members
  // on this node); index: the caller's among them.
  void match(Call call, Effects& fx);
  void collective(OpRequestData req, Call call, int n, uint32_t index, Effects& fx);
  void point_to_point(OpRequestData req, Call call, Effects& fx);
  void global_op(OpRequestData req, Call call, Effects& fx);
  // Under the lock: takes a complete op out of ops_ with what its launch needs (checks, and in
  // one process the strategy and the cached schedule). False: it failed, every peer answered.
  bool prepare_launch(const OpKey& key, PendingOp& op, Launch& l);
  // After unlocking (the lock order below): the launches.
  void launch(Launch& l);
  void launch_global(Launch& l);
  void launch_pair(PairLaunch& p);
  // The caller's group, or an error: it does not exist, or the caller is not a member.
  const Group* group_of(uint32_t gid, uint32_t peer, Status& error) const;
  void fail_everyone(const Status& why);
  // Under the lock: answers every peer of `op` that has called with `why` and leaves a tombstone
  // (late peers get `why` at once).
  static void fail_op(PendingOp& op, Status why);
  // Under the lock: the ranks an op's arrivals stand for, by arrival index: this process's members
  // of the group in rank order (the world: global ids; a group: its ranks).
  std::vector<int> arrival_ranks(uint32_t group) const;
  // Under the lock: the peers that have not called op `key` (as arrival_ranks numbers them), and
  // the members that have not asked for a pending group.
  std::vector<int> missing_from(const OpKey& key, const PendingOp& op) const;
  std::vector<int> came_to(const OpKey& key, const PendingOp& op) const;  // those that have called
  static std::vector<int> missing_from(const std::vector<uint32_t>& members, const PendingGroup& g);
  // An op a lost node takes down: its label, then the loss as the global client words it.
  static Status lost_op(OpKind kind, uint64_t seq, const Status& lost) {
    return {lost.code(), op_label(kind, seq) + ": " + lost.message()};
  }
  void clear();
  // The first error a caller brought along (Call::local_error), for every peer of the op; `offset`
  // turns local peer ids into global ones.
  static Status local_errors(const std::vector<std::optional<Arrival>>& arrivals, uint32_t offset);
  // One caller's: "peer 3 could not take part: ..." where it brought an error along, else ok.
  static Status local_error_of(const Arrival& a, uint32_t offset);
  // Multi-node: the schedule of an op over all its peers on all nodes, and the strategy the tuning
  // module picked for it; rank_node[r] is rank r's node (GlobalClient::rank_nodes). Takes the
  // lock for the cache only: a schedule not cached yet is compiled without it.
  std::shared_ptr<const CompiledSchedule> global_schedule(const Launch& l, const std::vector<uint32_t>& rank_node,
                                                          RunStrategy& strategy);
  // The shortest per-op timeout (OpOptions::timeout, Call::timeout) among an op's callers; zero:
  // none gave one.
  static std::chrono::milliseconds shortest_timeout(std::initializer_list<const Call*> calls);
  // given_only: only the ops' own (Call::timeout_given), not the callers' Configs'.
  static std::chrono::milliseconds shortest_timeout(const std::vector<std::optional<Arrival>>& arrivals,
                                                    bool given_only = false);
  // When an op of one process launched now must end: its callers' shortest per-op timeout from
  // now, else the configuration's (the first peer whose bound runs out fails the op for all).
  static Clock::time_point deadline(const Config& c, std::chrono::milliseconds shortest) {
    return Clock::now() + (shortest.count() > 0 ? shortest : c.timeout);
  }

  // The core's lock. It guards the bookkeeping below and nothing else happens under it: matching
  // calls, agreement checks, picking a strategy and looking up the schedule cache, and completing
  // replies with errors (a Reply's WaitWord is set under it; that wakes the peer thread, which
  // needs mu_ only to enter the core again). Whatever may block or allocate much runs after
  // unlocking, from Effects: making an op's plan, compiling a schedule not cached yet, making a
  // GPU run (make_device_run and the GPU layer), and every call into the global client that takes
  // its locks or writes to sockets (GlobalClient::lost, rank_nodes, begin_op: GlobalClient::mu_,
  // NetOp::mu_, the Poller's and the connections' locks, TLS). So mu_ is a leaf: no other lock is
  // taken while it is held (the global client's topology getters, called under it, take none).
  // The calls the other way, the global client telling on_node_lost of a lost node and
  // on_never_launched_elsewhere of another node's note, come after it released its own locks (the
  // poller's leader token may still be held: fine, since mu_ is a leaf), so there is no order to
  // break. The replies of one op stay consistent: an op
  // leaves ops_ when it is launched, so a timeout, reset, close or node loss that comes meanwhile
  // no longer sees it, and its launch answers all its peers alike (a loss by then reaches them
  // through the global client). Every node still sees every announcement: begin_op runs for every
  // launched multi-node op, failed ones included.
  mutable std::mutex mu_;
  LaunchHook launch_hook_;
  EnterHook enter_hook_;
  std::shared_ptr<GlobalClient> global_;
  std::optional<Status> closed_;
  std::optional<Status> node_lost_;  // the global client's first loss; kept past reset and finish
  std::shared_ptr<const Config> config_;
  std::vector<bool> registered_, finished_;
  std::map<OpKey, PendingOp> ops_;
  // Other nodes' never-launched notes of ops no peer here had called (on_never_launched_elsewhere),
  // until one does; the oldest dropped past kNotedNever.
  static constexpr std::size_t kNotedNever = 64;
  std::deque<std::pair<OpKey, Status>> noted_never_;
  std::map<uint32_t, Group> groups_;                         // 0 is the world, made at register
  std::map<std::vector<uint32_t>, PendingGroup> pending_groups_;  // by member list
  std::map<uint64_t, std::vector<uint32_t>> group_timers_;   // timer id -> pending member list
  uint32_t next_group_ = 1;
  // Keyed by (group, source, destination, tag); a receive from any source waits under source
  // kAnySource.
  std::map<P2PKey, std::deque<P2PHalf>> sends_, recvs_;
  // The half waiting under timer `key`, out of its queue (none: not waiting), its key and side.
  std::optional<P2PHalf> take_half(uint64_t key, P2PKey& pk, bool& is_send);
  uint64_t epoch_ = 0;                        // bumped whenever the collective is cleared
  // A waiting request's timer id (Reply::timer) names what on_timeout expires. Ids are never
  // reused, so a late on_timeout for a request answered meanwhile is harmless.
  uint64_t next_timer_ = 1;
  std::map<uint64_t, OpKey> op_timers_;      // timer id -> op
  std::map<uint64_t, P2PKey> p2p_timers_;    // timer id -> queue of the waiting half
  // Schedules of one process by op, strategy (algorithm, arity), n, root, count and element size.
  using FlatKey = std::tuple<int, int, int, int, int, std::size_t, std::size_t>;
  std::map<FlatKey, std::shared_ptr<const CompiledSchedule>> schedule_cache_;
  // Multi-node schedules and the strategy picked, by registration generation, op, dtype, root,
  // count and node layout (what the tuning module reads).
  using GlobalKey = std::tuple<uint64_t, int, int, int, std::size_t, std::vector<uint32_t>>;
  std::map<GlobalKey, std::pair<std::shared_ptr<const CompiledSchedule>, RunStrategy>> global_cache_;
};

} // namespace chorus
