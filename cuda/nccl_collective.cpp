#include "cuda/nccl_collective.hpp"

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/log.hpp"
#include "cuda/byte_at.hpp"
#include "cuda/device_status.hpp"
#include "cuda/device_worker.hpp"
#include "cuda/gpu.hpp"
#include "cuda/nccl_calls.hpp"
#include "cuda/nccl_rank_op.hpp"
#include "cuda/poll.hpp"

namespace chorus::gpu {

namespace {

// NCCL sets up a communicator in seconds, far longer than a small op's deadline may be.
constexpr auto kSetupTime = std::chrono::seconds(120);

NcclCalls& calls() { return *real_nccl_calls(); }  // the device actors here are NCCL's own

// The communicators of one GPU set. comm[r] is touched only on devices[r]'s device actor (NCCL
// forbids aborting a communicator while another thread uses it): other threads only raise
// `broken`, and each actor aborts its own communicator when it sees it.
struct Comms {
  std::vector<int> devices;
  std::vector<NcclComm> comm;
  std::atomic<bool> broken{false};
  std::vector<DeviceWorker::Ticket> setup;  // one setup task per rank
  std::atomic<int> setup_left{0};           // ranks whose setup has not succeeded yet
};

// On rank r's actor: marks the set broken and aborts r's communicator.
void abort_own(Comms& cs, int r) {
  cs.broken = true;
  if (cs.comm[r]) {
    calls().abort(cs.comm[r]);
    cs.comm[r] = nullptr;
  }
}

// Waits out a non-blocking NCCL call of rank r (see gpu::settle); stops once another rank gave up.
Status settle(Comms& cs, int r, NcclState st, Clock::time_point deadline, const std::string& what, const char* late) {
  return gpu::settle(calls(), cs.comm[r], std::move(st), deadline, what, late, [&cs] {
    return cs.broken ? aborted("another rank of this NCCL communicator failed") : Status::ok();
  });
}

// Every submission to several device actors goes through here, so that all actors see the ops of
// all GPU sets in one order: each rank's task blocks its actor until the other ranks' parts run,
// and two ops queued in different orders on two actors would wait for each other.
std::mutex& submit_mu() {
  static auto* mu = new std::mutex;
  return *mu;
}

std::mutex& comms_mu() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::map<std::vector<int>, std::shared_ptr<Comms>>& comms_cache() {
  static auto* cache = new std::map<std::vector<int>, std::shared_ptr<Comms>>;
  return *cache;
}

// The communicators of a GPU set, made on first use (and after a failure). Setup runs on every
// rank's actor at once, non-blocking, with its own deadline; it is queued before any op on those
// actors, so ops find it done (or broken) without anyone waiting here. Call with submit_mu held.
std::shared_ptr<Comms> comms_for(const std::vector<int>& devices, Status& error) {
  std::lock_guard<std::mutex> lk(comms_mu());
  auto& cache = comms_cache();
  auto it = cache.find(devices);
  if (it != cache.end() && !it->second->broken) return it->second;
  const bool again = it != cache.end();
  if (again) {  // a failed set: every rank's actor aborts its own, then it is rebuilt
    auto old = it->second;
    for (std::size_t r = 0; r < devices.size(); ++r)
      DeviceWorker::of(devices[r]).submit([old, r] {
        abort_own(*old, static_cast<int>(r));
        return Status::ok();
      });
    cache.erase(it);
  }
  if (log_on(LogLevel::info, Subsys::cuda)) {
    std::string list;
    for (int d : devices) list += (list.empty() ? "" : ",") + std::to_string(d);
    CHORUS_LOG(info, cuda, LogWhere{}, "NCCL: setting up communicators for GPUs " + list +
                                           (again ? " (again, after a failure)" : ""));
  }
  NcclId id;
  if (error = calls().unique_id(id); !error.is_ok()) return nullptr;
  auto cs = std::make_shared<Comms>();
  cs->devices = devices;
  cs->comm.assign(devices.size(), nullptr);
  const int n = static_cast<int>(devices.size());
  const auto deadline = Clock::now() + kSetupTime;
  cs->setup_left = n;
  for (int r = 0; r < n; ++r)
    cs->setup.push_back(DeviceWorker::of(devices[r]).submit([cs, id, n, r, deadline]() -> Status {
      if (cs->broken) return aborted("another rank's NCCL setup failed");
      const char* what = "ncclCommInitRankConfig";
      const NcclState res = calls().init_rank(cs->comm[r], n, id, r);
      Status s = cs->comm[r] ? settle(*cs, r, res, deadline, what, "NCCL communicator setup did not finish in time")
                 : res.ok()  ? Status::ok()
                             : device_error(std::string(what) + ": " + res.error);
      if (s.is_ok()) {
        --cs->setup_left;
        return s;
      }
      abort_own(*cs, r);
      return s;
    }));
  cache[devices] = cs;
  return cs;
}

bool overlap(const void* a, std::size_t na, const void* b, std::size_t nb) {
  auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return na && nb && a && b && x < y + nb && y < x + na;
}

// Rank r's part of `c` as NCCL sees it.
NcclRankOp rank_op(const DeviceCollective& c, int r) {
  NcclRankOp op;
  static_cast<OpDesc&>(op) = c;
  op.nranks = static_cast<int>(c.peers.size());
  op.rank = r;
  op.in = c.peers[r].in;
  op.out = c.peers[r].out;
  return op;
}

// Rank r's part of one op, on its device actor. Whatever fails aborts r's communicator.
Status run_rank(const DeviceCollective& c, Comms& cs, int r, DeviceWorker& w, Clock::time_point deadline) {
  Stream s = w.stream();
  // Late (the queue ahead took the time): give up without touching the communicator, which the
  // other ranks, equally late, leave alone too.
  if (Clock::now() >= deadline) return {Errc::timeout, "the op's turn on this GPU came after its deadline"};
  if (cs.broken || !cs.comm[r]) {
    abort_own(cs, r);
    return aborted("the NCCL communicator of these GPUs failed (it is rebuilt by the next op)");
  }
  const NcclRankOp op = rank_op(c, r);
  Status st = settle(cs, r, enqueue_rank(calls(), op, cs.comm[r], s), deadline, std::string(to_string(c.kind)),
                     "the NCCL op did not start in time");
  if (st.is_ok()) st = finish_rank(calls(), op, s);
  // Until the stream drains, an asynchronous NCCL error shows, another rank gives up, or the
  // deadline passes.
  if (st.is_ok())
    st = w.synchronize(deadline, [&cs, r]() -> Status {
      if (cs.broken) return aborted("another rank of this NCCL op failed");
      if (NcclState async = calls().state(cs.comm[r]); async.kind == NcclState::failed)
        return device_error("NCCL: " + async.error);
      return Status::ok();
    });
  if (!st.is_ok()) abort_own(cs, r);
  return st;
}

// What went wrong among the ranks' answers, named by rank and device.
Status first_cause(const std::vector<int>& devices, const std::vector<Status>& answers) {
  std::vector<std::string> who;
  for (std::size_t r = 0; r < devices.size(); ++r) who.push_back("rank " + std::to_string(r) + " (cuda:" + std::to_string(devices[r]) + ")");
  return gpu::first_cause(who, answers);
}

} // namespace

bool nccl_supports(const DeviceCollective& c) {
  if (c.peers.size() < 2) return false;
  std::set<int> devices;
  for (auto& p : c.peers) devices.insert(p.device);
  if (devices.size() != c.peers.size()) return false;  // logical peers share a GPU: plan path
  if (!nccl_serves(c.kind, c.dtype, c.redop)) return false;
  // NCCL's in-place forms are out == in (all_reduce, reduce, broadcast), out + r*block == in
  // (all_gather) and in + r*block == out (reduce_scatter); any other overlap of a rank's input and
  // output would read what was already overwritten: the plan path stages such inputs.
  const std::size_t b = c.count * dtype_size(c.dtype), n = c.peers.size();
  for (std::size_t r = 0; r < n; ++r) {
    const auto& p = c.peers[r];
    const std::size_t ib = input_bytes(c, static_cast<int>(r)), ob = output_bytes(c, static_cast<int>(r));
    if (!overlap(p.in, ib, p.out, ob)) continue;
    switch (c.kind) {
      case OpKind::all_reduce:
      case OpKind::reduce:
      case OpKind::broadcast:
      case OpKind::send:
      case OpKind::recv:
        if (p.in != p.out) return false;
        break;
      case OpKind::all_gather:
        if (p.in != byte_at(p.out, r * b)) return false;
        break;
      case OpKind::reduce_scatter:
        if (p.out != byte_at(p.in, r * b)) return false;
        break;
      default: return false;  // all_to_all, gather, scatter
    }
  }
  return true;
}

Status run_nccl(const DeviceCollective& c, Clock::time_point deadline) {
  std::vector<int> devices;
  std::vector<DeviceWorker*> workers;
  for (auto& p : c.peers) {
    Status missing;
    DeviceWorker* w = DeviceWorker::find(p.device, missing);
    if (!w) return in_context(c.label, missing);
    devices.push_back(p.device);
    workers.push_back(w);
  }
  auto op = std::make_shared<DeviceCollective>(c);
  const int n = static_cast<int>(devices.size());
  std::vector<DeviceWorker::Ticket> tickets;
  std::shared_ptr<Comms> cs;
  for (int attempt = 0;; ++attempt) {
    {
      std::lock_guard<std::mutex> lk(submit_mu());
      Status error;
      cs = comms_for(devices, error);
      if (!cs) return in_context(c.label, error);
      if (cs->setup_left == 0 || cs->broken || attempt > 0) {
        for (int r = 0; r < n; ++r) {
          DeviceWorker* w = workers[r];
          tickets.push_back(w->submit([op, cs, r, w, deadline] { return run_rank(*op, *cs, r, *w, deadline); }));
        }
        break;
      }
    }
    // A fresh communicator: wait for its setup (which has its own, longer deadline and is never
    // abandoned) without holding the submission order, so that a slow setup costs this op a
    // timeout rather than the communicator.
    std::vector<Status> setup(n);
    for (int r = 0; r < n; ++r) setup[r] = workers[r]->wait(cs->setup[r], deadline, "NCCL communicator setup", false);
    if (Status e = first_cause(devices, setup); !e.is_ok()) return in_context(c.label, e);
  }
  std::vector<Status> answers(n);
  // The tasks stop themselves at the deadline; a little longer here lets their answer come back.
  for (int r = 0; r < n; ++r) answers[r] = workers[r]->wait(tickets[r], deadline + std::chrono::seconds(2), c.label);
  Status result = in_context(c.label, first_cause(devices, answers));
  if (!result.is_ok()) CHORUS_LOG(warn, cuda, LogWhere{}, "NCCL op failed, its communicators rebuilt next time: " + result.message());
  return result;
}

std::size_t release_nccl_sets(Clock::time_point deadline) {
  std::map<std::vector<int>, std::shared_ptr<Comms>> sets;
  {
    std::lock_guard<std::mutex> order(submit_mu());
    std::lock_guard<std::mutex> lk(comms_mu());
    sets.swap(comms_cache());
  }
  std::vector<std::pair<DeviceWorker*, DeviceWorker::Ticket>> aborts;
  for (auto& [devices, cs] : sets)
    for (std::size_t r = 0; r < devices.size(); ++r) {
      DeviceWorker& w = DeviceWorker::of(devices[r]);
      aborts.emplace_back(&w, w.submit([cs = cs, r] {
        abort_own(*cs, static_cast<int>(r));
        return Status::ok();
      }));
    }
  for (auto& [w, t] : aborts) (void)w->wait(t, deadline, "releasing NCCL communicators", /*abandon=*/false);
  return sets.size();
}

std::size_t nccl_sets_kept() {
  std::lock_guard<std::mutex> lk(comms_mu());
  return comms_cache().size();
}

} // namespace chorus::gpu
