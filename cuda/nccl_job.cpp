#include "cuda/nccl_job.hpp"

#include <algorithm>
#include <atomic>

#include "core/log.hpp"
#include "cuda/device_status.hpp"

namespace chorus::gpu {

// One communicator of one key at one generation, as this node holds it: a handle per rank of this
// node. handles[i] is touched only on devices[i]'s device actor (NCCL forbids aborting a
// communicator while another thread uses it): other threads raise `broken`, and each actor aborts
// its own handle when it sees that.
struct NcclJob::Comm {
  NcclKey key;
  uint64_t generation = 0;
  std::vector<int> ranks;    // this node's global ranks, ascending
  std::vector<int> devices;  // their GPUs here
  std::vector<NcclComm> handles;
  std::atomic<bool> broken{false};
  std::mutex why_mu;
  std::string why;  // what broke it, for the ranks that stop because of it

  void mark_broken(const std::string& what) {
    std::lock_guard<std::mutex> lk(why_mu);
    if (why.empty()) why = what;
    broken = true;
  }
  std::string broken_because() {
    std::lock_guard<std::mutex> lk(why_mu);
    return why;
  }
  std::size_t index_of(int rank) const {
    return static_cast<std::size_t>(std::lower_bound(ranks.begin(), ranks.end(), rank) - ranks.begin());
  }
};

namespace {

// On the device actor of handle i: aborts it (once).
void abort_own(NcclCalls& calls, NcclJob::Comm& c, std::size_t i) {
  if (c.handles[i]) {
    calls.abort(c.handles[i]);
    c.handles[i] = nullptr;
  }
}

Status stop_if_broken(NcclJob::Comm& c) {
  return c.broken ? aborted(c.broken_because().empty() ? "another rank of this NCCL communicator failed"
                                                       : c.broken_because())
                  : Status::ok();
}

std::string gpu_name(const NcclKey& key, int rank) {
  return "rank " + std::to_string(rank) + " (node " + std::to_string(key.gpus[rank].node) + " cuda:" +
         std::to_string(key.gpus[rank].device) + ")";
}

} // namespace

std::string NcclKey::str() const {
  std::string s = "group " + std::to_string(group) + " (";
  for (std::size_t r = 0; r < gpus.size(); ++r)
    s += (r ? ", node " : "node ") + std::to_string(gpus[r].node) + " cuda:" + std::to_string(gpus[r].device);
  return s + ")";
}

NcclJob::NcclJob(uint32_t node, NcclCalls& calls) : node_(node), calls_(calls) {}

NcclJob::~NcclJob() { abort_all("the job ended"); }

NcclAnnounce NcclJob::announce(const NcclKey& key) const {
  auto matches = [&key](const NcclKey& k) {
    if (k.group != key.group || k.gpus.size() != key.gpus.size()) return false;
    for (std::size_t r = 0; r < k.gpus.size(); ++r)
      if (k.gpus[r].node != key.gpus[r].node || (key.gpus[r].device >= 0 && k.gpus[r].device != key.gpus[r].device))
        return false;
    return true;
  };
  std::lock_guard<std::mutex> lk(mu_);
  NcclAnnounce a;
  if (auto it = last_.find(key.group); it != last_.end()) a.last = it->second;
  for (const auto& [k, c] : comms_)
    if (!c->broken && matches(k)) a.live = std::max(a.live, c->generation);
  return a;
}

uint64_t NcclJob::agree(const std::vector<NcclAnnounce>& announced) {
  uint64_t top = 0;
  bool shared = !announced.empty();
  for (const auto& a : announced) {
    top = std::max(top, a.last);
    shared = shared && a.live != 0 && a.live == announced.front().live;
  }
  return shared ? announced.front().live : top + 1;
}

Status NcclJob::spare_id(uint64_t group, uint64_t generation, NcclId& id) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (auto it = spares_.find(group); it != spares_.end() && it->second.first == generation) {
      id = it->second.second;
      return Status::ok();
    }
  }
  if (Status s = calls_.unique_id(id); !s.is_ok()) return s;
  std::lock_guard<std::mutex> lk(mu_);
  spares_[group] = {generation, id};
  return Status::ok();
}

uint64_t NcclJob::built() const {
  std::lock_guard<std::mutex> lk(mu_);
  return built_;
}

void NcclJob::retire(const std::shared_ptr<Comm>& c, const std::string& why) {
  c->mark_broken(why);
  // Each handle is aborted on its own device actor, after whatever that actor does now (an op
  // inside the communicator stops at once: it sees `broken`); nobody waits for these.
  NcclCalls* calls = &calls_;
  for (std::size_t i = 0; i < c->handles.size(); ++i)
    calls_.submit(c->devices[i], [calls, c, i] {
      abort_own(*calls, *c, i);
      return Status::ok();
    });
}

std::shared_ptr<NcclJob::Comm> NcclJob::comm_for(const NcclKey& key, uint64_t generation,
                                                 const std::vector<int>& my_ranks, Clock::time_point deadline,
                                                 NcclIdChannel& ids, Status& error) {
  std::shared_ptr<Comm> old, c;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = comms_.find(key);
    if (it != comms_.end() && !it->second->broken && it->second->generation == generation &&
        it->second->ranks == my_ranks)
      return it->second;
    if (it != comms_.end()) {
      old = it->second;
      comms_.erase(it);
    }
    last_[key.group] = std::max(last_[key.group], generation);
    ++built_;
    c = std::make_shared<Comm>();
    c->key = key;
    c->generation = generation;
    c->ranks = my_ranks;
    for (int r : my_ranks) c->devices.push_back(key.gpus[r].device);
    c->handles.assign(my_ranks.size(), nullptr);
    comms_[key] = c;
  }
  if (old) retire(old, "replaced by generation " + std::to_string(generation));
  CHORUS_LOG(info, cuda, LogWhere{}, "NCCL: node " + std::to_string(node_) + " sets up the communicator of " + key.str() +
                                         ", generation " + std::to_string(generation));
  // The id: made here (or the spare announced) when this node holds rank 0, else awaited from the
  // node that does.
  NcclId id{};
  const bool maker = key.gpus.front().node == node_;
  if (maker) {
    error = spare_id(key.group, generation, id);
    std::lock_guard<std::mutex> lk(mu_);
    spares_.erase(key.group);  // used now, whatever comes of it
  } else {
    error = ids.await(key, generation, deadline, id);
  }
  if (error.is_ok() && maker) error = ids.publish(key, generation, id);
  if (!error.is_ok()) {
    error = in_context("the NCCL unique id of " + key.str() + ", generation " + std::to_string(generation), error);
    retire(c, error.message());
    return nullptr;
  }
  const int n = static_cast<int>(key.gpus.size());
  std::vector<TaskQueue::Ticket> setup;
  {
    std::lock_guard<std::mutex> lk(submit_mu_);
    NcclCalls* calls = &calls_;
    for (std::size_t i = 0; i < my_ranks.size(); ++i)
      setup.push_back(calls_.submit(c->devices[i], [calls, c, i, n, id, deadline]() -> Status {
        if (c->broken) return stop_if_broken(*c);
        const NcclState res = calls->init_rank(c->handles[i], n, id, c->ranks[i]);
        Status s = c->handles[i] ? settle(*calls, c->handles[i], res, deadline, "ncclCommInitRankConfig",
                                          "the NCCL communicator's setup did not finish in time",
                                          [&c] { return stop_if_broken(*c); })
                   : res.ok() ? Status::ok()
                              : device_error("ncclCommInitRankConfig: " + res.error);
        if (!s.is_ok()) abort_own(*calls, *c, i);
        return s;
      }));
  }
  std::vector<Status> answers(my_ranks.size());
  std::vector<std::string> who;
  for (std::size_t i = 0; i < my_ranks.size(); ++i) {
    answers[i] = calls_.wait(c->devices[i], setup[i], deadline + std::chrono::seconds(2), "NCCL communicator setup");
    who.push_back(gpu_name(key, my_ranks[i]));
  }
  if (error = first_cause(who, answers); !error.is_ok()) {
    retire(c, error.message());
    return nullptr;
  }
  return c;
}

Status NcclJob::run(const NcclKey& key, uint64_t generation, const std::vector<NcclRankOp>& ranks,
                    Clock::time_point deadline, NcclIdChannel& ids) {
  const int n = static_cast<int>(key.gpus.size());
  std::vector<int> my_ranks;
  for (const auto& op : ranks) {
    if (op.rank < 0 || op.rank >= n || op.nranks != n)
      return {Errc::invalid_argument, "NCCL: rank " + std::to_string(op.rank) + " of " + std::to_string(op.nranks) +
                                          " is not a rank of " + key.str()};
    if (key.gpus[op.rank].node != node_)
      return {Errc::invalid_argument,
              "NCCL: " + gpu_name(key, op.rank) + " is not on node " + std::to_string(node_) + ", which runs it"};
    if (!nccl_serves(op.kind, op.dtype, op.redop))
      return {Errc::invalid_argument, std::string("NCCL cannot serve ") + std::string(to_string(op.kind)) + " of " +
                                          std::string(to_string(op.dtype)) + " with " +
                                          std::string(to_string(op.redop))};
    my_ranks.push_back(op.rank);
  }
  std::vector<std::size_t> order(ranks.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return ranks[a].rank < ranks[b].rank; });
  std::sort(my_ranks.begin(), my_ranks.end());
  if (std::adjacent_find(my_ranks.begin(), my_ranks.end()) != my_ranks.end())
    return {Errc::invalid_argument, "NCCL: a rank of " + key.str() + " comes twice"};

  Status error;
  std::shared_ptr<Comm> c = comm_for(key, generation, my_ranks, deadline, ids, error);
  if (!c) return error;
  std::vector<TaskQueue::Ticket> tickets(ranks.size());
  {
    std::lock_guard<std::mutex> lk(submit_mu_);
    NcclCalls* calls = &calls_;
    for (std::size_t k : order) {
      const NcclRankOp op = ranks[k];
      const std::size_t i = c->index_of(op.rank);
      tickets[k] = calls_.submit(c->devices[i], [calls, c, i, op, deadline]() -> Status {
        // Late (the queue ahead took the time): give up without touching the communicator.
        if (Clock::now() >= deadline) return {Errc::timeout, "the op's turn on this GPU came after its deadline"};
        if (c->broken || !c->handles[i]) {
          abort_own(*calls, *c, i);
          return c->broken ? stop_if_broken(*c) : aborted("this rank's NCCL communicator is gone");
        }
        const int device = c->devices[i];
        auto stop = [&c] { return stop_if_broken(*c); };
        const Stream s = calls->stream(device);
        Status st = settle(*calls, c->handles[i], enqueue_rank(*calls, op, c->handles[i], s), deadline,
                           std::string(to_string(op.kind)), "the NCCL op did not start in time", stop);
        if (st.is_ok()) st = finish_rank(*calls, op, s);
        if (st.is_ok())
          st = calls->synchronize(device, deadline, [&]() -> Status {
            if (Status b = stop(); !b.is_ok()) return b;
            if (NcclState async = calls->state(c->handles[i]); async.kind == NcclState::failed)
              return device_error("NCCL: " + async.error);
            return Status::ok();
          });
        if (!st.is_ok()) abort_own(*calls, *c, i);
        return st;
      });
    }
  }
  std::vector<Status> answers(ranks.size());
  std::vector<std::string> who;
  for (std::size_t k = 0; k < ranks.size(); ++k) {
    // The tasks stop themselves at the deadline; a little longer here lets their answer come back.
    const std::size_t i = c->index_of(ranks[k].rank);
    answers[k] = calls_.wait(c->devices[i], tickets[k], deadline + std::chrono::seconds(2), "NCCL op");
    who.push_back(gpu_name(key, ranks[k].rank));
  }
  Status result = first_cause(who, answers);
  if (!result.is_ok()) {
    CHORUS_LOG(warn, cuda, LogWhere{}, "NCCL op failed on node " + std::to_string(node_) + ", its communicator of " +
                                           key.str() + " is rebuilt by the next op: " + result.message());
    std::lock_guard<std::mutex> lk(mu_);
    if (auto it = comms_.find(key); it != comms_.end() && it->second == c) comms_.erase(it);
  }
  if (!result.is_ok()) retire(c, result.message());
  return result;
}

void NcclJob::node_lost(uint32_t node, const std::string& why) {
  std::vector<std::shared_ptr<Comm>> hit;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto it = comms_.begin(); it != comms_.end();) {
      const auto& gpus = it->first.gpus;
      if (std::any_of(gpus.begin(), gpus.end(), [node](const NcclGpu& g) { return g.node == node; })) {
        hit.push_back(it->second);
        it = comms_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : hit) retire(c, why);
}

void NcclJob::abort_all(const std::string& why) {
  std::map<NcclKey, std::shared_ptr<Comm>> comms;
  {
    std::lock_guard<std::mutex> lk(mu_);
    comms.swap(comms_);
  }
  for (auto& [key, c] : comms) retire(c, why);
}

} // namespace chorus::gpu
