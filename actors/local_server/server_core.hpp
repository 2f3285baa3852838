// The local server's logic, free of actor code: registration, matching the calls of one op by
// (group, sequence number), agreement checks, timeouts, and handing each peer its plan. The CAF
// actor in local_server.cpp feeds it control messages; peer threads of this process enter it
// directly with their op requests (a mailbox hop would cost a thread wake-up per op), so every
// entry point takes the core's lock.
// One class, its members in files of one job each: lifecycle.cpp (register, finish, reset,
// close), groups.cpp, op_matching.cpp (collectives and send/recv pairs), launch_local.cpp (host
// schedules and GPU runs of this process), launch_global.cpp (multi-node ops), timeouts.cpp.
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

#include <chorus/config.hpp>
#include "actors/local_server/call.hpp"
#include "actors/local_server/op_validation.hpp"
#include "messages/peer_codec.hpp"
#include "strategies/tuning.hpp"

namespace chorus {

class GlobalClient;

class LocalServerCore {
 public:
  // Asks the host to call on_timeout(key) after `after`. May be empty: then whoever waits on a
  // reply calls on_timeout(reply.timer) itself when its deadline passes.
  using TimerFn = std::function<void(uint64_t key, std::chrono::milliseconds after)>;
  explicit LocalServerCore(TimerFn timer = {});
  ~LocalServerCore();

  void on_register(Call call);
  void on_finish(Call call);
  void on_reset(Call call);
  void on_op(Call call);
  void on_group(Call call);
  void on_timeout(uint64_t key);
  // Multi-node mode: the world group spans every node (global ranks, see GlobalClient) and its
  // collective ops run through the global client once every local peer has called.
  // Multi-node mode: registers group `gid` (members: global ids, by rank) on this node once its
  // members agreed (Peer::new_group). Idempotent: each local member calls it.
  void adopt_group(uint32_t gid, const std::vector<uint32_t>& members);
  void set_global(std::shared_ptr<GlobalClient> g) {
    std::lock_guard<std::mutex> lk(mu_);
    global_ = std::move(g);
  }
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
  };
  struct P2PHalf {
    Arrival arrival;
    uint64_t timer;
  };

  // A control message that does not decode.
  static Status garbled(const std::string& err) { return {Errc::invalid_argument, err}; }
  Status check_caller(uint32_t peer, uint64_t epoch) const;
  // n: the arrivals to wait for (the group's members on this node); index: the caller's among them.
  void collective(OpRequestData req, Call call, int n, uint32_t index);
  void point_to_point(OpRequestData req, Call call);
  void global_op(OpRequestData req, Call call);
  void launch(const OpKey& key, PendingOp& op);
  void launch_global(const OpKey& key, PendingOp& op);
  // A matched send/recv pair: checks that the halves fit and plans the copy.
  void launch_pair(const P2PKey& key, Arrival snd, Arrival rcv);
  // The caller's group, or an error: it does not exist, or the caller is not a member.
  const Group* group_of(uint32_t gid, uint32_t peer, Status& error) const;
  void fail_everyone(const Status& why);
  void clear();
  std::shared_ptr<const CompiledSchedule> schedule_for(const ScheduleParams& p);
  // The first error a caller brought along (Call::local_error), for every peer of the op.
  Status local_errors(const PendingOp& op) const;
  // Multi-node: the schedule of an op over all its peers (n) on all nodes, and the strategy the
  // tuning module picked for it; rank_node[r] is rank r's node (GlobalClient::rank_nodes).
  std::shared_ptr<const CompiledSchedule> global_schedule(const OpShape& shape, int n,
                                                          const std::vector<uint32_t>& rank_node,
                                                          RunStrategy& strategy);
  Clock::time_point deadline() const { return Clock::now() + config_->timeout; }

  void start_timer(uint64_t key);

  mutable std::mutex mu_;
  TimerFn timer_;
  std::shared_ptr<GlobalClient> global_;
  std::optional<Status> closed_;
  std::optional<Config> config_;
  std::vector<bool> registered_, finished_;
  std::map<OpKey, PendingOp> ops_;
  std::map<uint32_t, Group> groups_;                         // 0 is the world, made at register
  std::map<std::vector<uint32_t>, PendingGroup> pending_groups_;  // by member list
  std::map<uint64_t, std::vector<uint32_t>> group_timers_;   // timer id -> pending member list
  uint32_t next_group_ = 1;
  std::map<P2PKey, std::deque<P2PHalf>> sends_, recvs_;
  uint64_t epoch_ = 0;                        // bumped whenever the collective is cleared
  uint64_t next_timer_ = 1;                  // timer ids are never reused, so a stale tick is harmless
  std::map<uint64_t, OpKey> op_timers_;      // timer id -> op
  std::map<uint64_t, P2PKey> p2p_timers_;    // timer id -> queue of the waiting half
  std::map<std::tuple<int, int, int, int, int, std::size_t, std::size_t>,
           std::shared_ptr<const CompiledSchedule>> schedule_cache_;
  // Multi-node schedules and the strategy picked, by registration generation, op, dtype, root,
  // count and node layout (what the tuning module reads).
  std::map<std::tuple<uint64_t, int, int, int, std::size_t, std::vector<uint32_t>>,
           std::pair<std::shared_ptr<const CompiledSchedule>, RunStrategy>>
      global_cache_;
};

} // namespace chorus
