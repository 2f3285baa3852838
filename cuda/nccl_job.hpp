// NCCL across the processes of a job: one communicator spans every GPU of an op, whichever node
// process holds it (one process per GPU is the usual deployment). This process's share: its ranks.
//
// Bootstrap: the node holding the op's rank 0 makes the ncclUniqueId and publishes it through
// chorus's control plane (NcclIdChannel); every node's device actors then call
// ncclCommInitRankConfig, non-blocking, with their global ranks, within the op's deadline.
// Communicators are cached per key: the group and the GPUs of its ranks in order (a group, or
// another GPU set, gets its own); generations are numbered per group. Which communicator an op
// uses is agreed before NCCL is entered:
// every node announces its cached one (NcclAnnounce, inside the op's announcement) and every node
// computes the same NcclJob::agree() from all of them, so a node that lost its communicator makes
// every node build a fresh one under a new generation, and no node waits inside NCCL for a rank
// that will not come. A lost node or an op that fails aborts the communicators it touched, each on
// its own device actor (ncclCommAbort), and the next op builds fresh ones.
//
// The NCCL and CUDA calls go through cuda/nccl_calls.hpp, so that all of this runs against a test
// double on machines without a GPU.
#pragma once
#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <chorus/status.hpp>

#include "cuda/nccl_calls.hpp"
#include "cuda/nccl_rank_op.hpp"

namespace chorus::gpu {

// One rank's GPU: the node process that holds it and the device there.
struct NcclGpu {
  uint32_t node = 0;
  int device = 0;
  auto operator<=>(const NcclGpu&) const = default;
};

// Which communicator: the group (0: the whole job) and its ranks' GPUs in rank order.
struct NcclKey {
  uint64_t group = 0;
  std::vector<NcclGpu> gpus;
  auto operator<=>(const NcclKey&) const = default;
  std::string str() const;  // "group 0 (node 0 cuda:0, node 0 cuda:1, node 1 cuda:0)"
};

// What a node says of its communicator of a key before an op: the generation of the one it holds
// and can use (0: none), and the last generation of the group it built or joined.
struct NcclAnnounce {
  uint64_t live = 0;
  uint64_t last = 0;
  auto operator<=>(const NcclAnnounce&) const = default;
};

// Carries a communicator's unique id from the node of rank 0 to the other nodes of the key, per
// generation. The job's control plane implements it (the id rides in rank 0's node's
// announcement of the op); tests, in memory.
class NcclIdChannel {
 public:
  virtual ~NcclIdChannel() = default;
  // From the node of the key's rank 0, to every other node of the key.
  virtual Status publish(const NcclKey& key, uint64_t generation, const NcclId& id) = 0;
  // The id published for (key, generation), or a timeout (or the channel's error) at `deadline`.
  virtual Status await(const NcclKey& key, uint64_t generation, Clock::time_point deadline, NcclId& id) = 0;
};

class NcclJob {
 public:
  NcclJob(uint32_t node, NcclCalls& calls);
  ~NcclJob();  // aborts every communicator still held
  NcclJob(const NcclJob&) = delete;
  NcclJob& operator=(const NcclJob&) = delete;

  uint32_t node() const { return node_; }
  // What this node announces for `key` before an op. Before the announcements a node knows only
  // its own ranks' GPUs: the others' may be device -1 (a cached communicator matches where the
  // rest agrees).
  NcclAnnounce announce(const NcclKey& key) const;
  // The generation every node uses, computed alike by all from every node's announcement: the
  // shared one where every node holds it live, else a fresh one above every node's last.
  static uint64_t agree(const std::vector<NcclAnnounce>& announced);
  // The node of rank 0: the id it will build generation `generation` of `group` with, made once
  // (ncclGetUniqueId) and kept until a communicator is built with it, so that it can go out with
  // the op's announcement before anyone knows whether a fresh communicator is needed.
  Status spare_id(uint64_t group, uint64_t generation, NcclId& id);

  // Runs this node's ranks of one op (`ranks`: each rank's part; op.rank is its global rank, whose
  // GPU is key.gpus[op.rank] on this node) with the communicator of (key, generation), building it
  // first where this node holds another. Returns when every rank here is done, with the first
  // cause among them, by `deadline` at the latest (a task is then told to stop; it answers within
  // a moment). A failure aborts this node's communicator of the key.
  // `ids` carries the unique id where a communicator is built.
  Status run(const NcclKey& key, uint64_t generation, const std::vector<NcclRankOp>& ranks, Clock::time_point deadline,
             NcclIdChannel& ids);

  // A node of the job is lost: every communicator with a rank there is aborted now (each on its
  // device actor; an op inside one stops at once with `why`), and the next op builds a fresh one.
  void node_lost(uint32_t node, const std::string& why);
  // The job cannot go on (a node or a link lost): every communicator is aborted, as above.
  void abort_all(const std::string& why);

  // How many communicators this node has built (tests, the status report).
  uint64_t built() const;

  struct Comm;  // one communicator of one key: this node's ranks' handles

 private:
  std::shared_ptr<Comm> comm_for(const NcclKey& key, uint64_t generation, const std::vector<int>& my_ranks,
                                 Clock::time_point deadline, NcclIdChannel& ids, Status& error);
  void retire(const std::shared_ptr<Comm>& c, const std::string& why);

  const uint32_t node_;
  NcclCalls& calls_;
  mutable std::mutex mu_;  // guards comms_, last_, spares_ and built_; never held across a wait
  std::map<NcclKey, std::shared_ptr<Comm>> comms_;
  std::map<uint64_t, uint64_t> last_;  // by group: the last generation built or joined, live or not
  std::map<uint64_t, std::pair<uint64_t, NcclId>> spares_;  // by group: (generation, id) not yet used
  uint64_t built_ = 0;
  // Submissions to several device actors go in one order (an op's task blocks its actor until the
  // other ranks come: two ops queued in different orders on two actors would wait for each other).
  std::mutex submit_mu_;
};

} // namespace chorus::gpu
