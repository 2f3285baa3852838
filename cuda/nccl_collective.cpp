#include "cuda/nccl_collective.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

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
#include "cuda/device_status.hpp"
#include "cuda/device_worker.hpp"
#include "cuda/gpu.hpp"
#include "cuda/poll.hpp"
#include "cuda/reduce_kernel.hpp"

namespace chorus::gpu {

namespace {

// NCCL sets up a communicator in seconds, far longer than a small op's deadline may be.
constexpr auto kSetupTime = std::chrono::seconds(120);
// A non-blocking NCCL call in progress is looked at this often (there is nothing to sleep on).
constexpr PollPace kNcclPace{std::chrono::microseconds(0), std::chrono::microseconds(20)};

Status nccl_error(const std::string& what, ncclResult_t r, ncclComm_t comm = nullptr) {
  std::string s = what + ": " + ncclGetErrorString(r);
  if (comm) {
    const char* last = ncclGetLastError(comm);
    if (last && *last) s += std::string(" (") + last + ")";
  }
  return device_error(std::move(s));
}

// A rank that gives up because another one failed says so with this prefix, so that run_nccl
// reports the first real cause rather than the echo.
const char* const kAborted = "aborted: ";
Status aborted(const std::string& why) { return device_error(kAborted + why); }
bool is_aborted(const Status& s) { return s.message().rfind(kAborted, 0) == 0; }

std::optional<ncclDataType_t> nccl_type(DType t) {
  switch (t) {
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::i8: return ncclInt8;
    case DType::u8: return ncclUint8;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
  }
  return std::nullopt;
}

// Floats average with ncclAvg (no overflow of a half-precision sum); integers sum and are divided
// afterwards by our kernel (truncating, as on the host). NCCL's float min/max drop NaN where ours
// propagate it, and it has no bitwise ops: those are served by the plan path.
std::optional<ncclRedOp_t> nccl_op(ReduceOp op, DType t) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return is_floating(t) ? ncclAvg : ncclSum;
    case ReduceOp::prod: return ncclProd;
    case ReduceOp::min: return is_floating(t) ? std::nullopt : std::optional(ncclMin);
    case ReduceOp::max: return is_floating(t) ? std::nullopt : std::optional(ncclMax);
    default: return std::nullopt;
  }
}

// The communicators of one GPU set. comm[r] is touched only on devices[r]'s device actor (NCCL
// forbids aborting a communicator while another thread uses it): other threads only raise
// `broken`, and each actor aborts its own communicator when it sees it.
struct Comms {
  std::vector<int> devices;
  std::vector<ncclComm_t> comm;
  std::atomic<bool> broken{false};
  std::vector<DeviceWorker::Ticket> setup;  // one setup task per rank
  std::atomic<int> setup_left{0};           // ranks whose setup has not succeeded yet
};

// On rank r's actor: marks the set broken and aborts r's communicator.
void abort_own(Comms& cs, int r) {
  cs.broken = true;
  if (cs.comm[r]) {
    ncclCommAbort(cs.comm[r]);
    cs.comm[r] = nullptr;
  }
}

// Waits out a non-blocking NCCL call (`what`, which answered `res`) on rank r's actor: ok once it
// succeeded, NCCL's error, a timeout saying `late` at the deadline, or "aborted" once another rank
// gave up.
Status settle(Comms& cs, int r, ncclResult_t res, Clock::time_point deadline, const std::string& what,
              const char* late) {
  auto done = [&] {
    if (res == ncclInProgress && ncclCommGetAsyncError(cs.comm[r], &res) != ncclSuccess) res = ncclInternalError;
    return res != ncclInProgress;
  };
  auto stop = [&] { return cs.broken ? aborted("another rank of this NCCL communicator failed") : Status::ok(); };
  if (Status s = poll_until(done, stop, deadline, kNcclPace, late); !s.is_ok()) return s;
  return res == ncclSuccess ? Status::ok() : nccl_error(what, res, cs.comm[r]);
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
  ncclUniqueId id;
  if (auto r = ncclGetUniqueId(&id); r != ncclSuccess) {
    error = nccl_error("ncclGetUniqueId", r);
    return nullptr;
  }
  auto cs = std::make_shared<Comms>();
  cs->devices = devices;
  cs->comm.assign(devices.size(), nullptr);
  const int n = static_cast<int>(devices.size());
  const auto deadline = Clock::now() + kSetupTime;
  cs->setup_left = n;
  for (int r = 0; r < n; ++r)
    cs->setup.push_back(DeviceWorker::of(devices[r]).submit([cs, id, n, r, deadline]() -> Status {
      if (cs->broken) return aborted("another rank's NCCL setup failed");
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      const char* what = "ncclCommInitRankConfig";
      ncclResult_t res = ncclCommInitRankConfig(&cs->comm[r], n, id, r, &config);
      Status s = cs->comm[r] ? settle(*cs, r, res, deadline, what, "NCCL communicator setup did not finish in time")
                 : res == ncclSuccess ? Status::ok()
                                      : nccl_error(what, res);
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

char* at(void* p, std::size_t off) { return static_cast<char*>(p) + off; }
const char* at(const void* p, std::size_t off) { return static_cast<const char*>(p) + off; }

bool overlap(const void* a, std::size_t na, const void* b, std::size_t nb) {
  auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return na && nb && a && b && x < y + nb && y < x + na;
}

// Rank r's calls for the op, enqueued on stream s (they may return ncclInProgress: settle them).
ncclResult_t enqueue(const DeviceCollective& c, int r, ncclComm_t comm, cudaStream_t s) {
  const auto& me = c.peers[r];
  const ncclDataType_t t = *nccl_type(c.dtype);
  const std::size_t n = c.peers.size(), count = c.count, block = count * dtype_size(c.dtype);
  const int root = c.root;
  switch (c.kind) {
    case OpKind::all_reduce: return ncclAllReduce(me.in, me.out, count, t, *nccl_op(c.redop, c.dtype), comm, s);
    case OpKind::reduce:
      return ncclReduce(me.in, r == root ? me.out : nullptr, count, t, *nccl_op(c.redop, c.dtype), root, comm, s);
    case OpKind::reduce_scatter:
      return ncclReduceScatter(me.in, me.out, count, t, *nccl_op(c.redop, c.dtype), comm, s);
    case OpKind::all_gather: return ncclAllGather(me.in, me.out, count, t, comm, s);
    case OpKind::broadcast:
    case OpKind::send:
    case OpKind::recv: return ncclBroadcast(r == root ? me.in : me.out, me.out, count, t, root, comm, s);
    case OpKind::all_to_all:
    case OpKind::gather:
    case OpKind::scatter: break;
    case OpKind::barrier: return ncclSuccess;
  }
  // The exchange ops as grouped sends and receives; a rank's own block is a local copy.
  if (auto e = ncclGroupStart(); e != ncclSuccess) return e;
  ncclResult_t res = ncclSuccess;
  auto self_copy = [&](void* dst, const void* src) {
    if (dst != src && cudaMemcpyAsync(dst, src, block, cudaMemcpyDefault, s) != cudaSuccess)
      res = ncclUnhandledCudaError;
  };
  for (std::size_t j = 0; j < n && res == ncclSuccess; ++j) {
    const int pj = static_cast<int>(j);
    if (c.kind == OpKind::all_to_all) {
      if (pj == r) {
        self_copy(at(me.out, j * block), at(me.in, j * block));
        continue;
      }
      if ((res = ncclSend(at(me.in, j * block), count, t, pj, comm, s)) != ncclSuccess) break;
      res = ncclRecv(at(me.out, j * block), count, t, pj, comm, s);
    } else if (c.kind == OpKind::gather) {
      if (r != root) {
        if (pj == root) res = ncclSend(me.in, count, t, root, comm, s);
      } else if (pj == r) {
        self_copy(at(me.out, j * block), me.in);
      } else {
        res = ncclRecv(at(me.out, j * block), count, t, pj, comm, s);
      }
    } else {  // scatter
      if (r != root) {
        if (pj == root) res = ncclRecv(me.out, count, t, root, comm, s);
      } else if (pj == r) {
        self_copy(me.out, at(me.in, j * block));
      } else {
        res = ncclSend(at(me.in, j * block), count, t, pj, comm, s);
      }
    }
  }
  ncclResult_t end = ncclGroupEnd();
  return res != ncclSuccess ? res : end;
}

// Rank r's part of one op, on its device actor. Whatever fails aborts r's communicator.
Status run_rank(const DeviceCollective& op, Comms& cs, int r, DeviceWorker& w, Clock::time_point deadline) {
  auto s = static_cast<cudaStream_t>(w.stream());
  // Late (the queue ahead took the time): give up without touching the communicator, which the
  // other ranks, equally late, leave alone too.
  if (Clock::now() >= deadline) return {Errc::timeout, "the op's turn on this GPU came after its deadline"};
  if (cs.broken || !cs.comm[r]) {
    abort_own(cs, r);
    return aborted("the NCCL communicator of these GPUs failed (it is rebuilt by the next op)");
  }
  Status st = settle(cs, r, enqueue(op, r, cs.comm[r], s), deadline, std::string(to_string(op.kind)),
                     "the NCCL op did not start in time");
  const auto& me = op.peers[r];
  if (st.is_ok() && op.redop == ReduceOp::avg && !is_floating(op.dtype) && holds_reduction(op.kind, r, op.root)) {
    void* dst[1] = {me.out};
    const void* src[1] = {me.out};
    st = launch_reduce(s, op.dtype, ReduceOp::sum, dst, 1, src, 1, op.count, op.peers.size());
  }
  // Until the stream drains, an asynchronous NCCL error shows, another rank gives up, or the
  // deadline passes.
  if (st.is_ok())
    st = w.synchronize(deadline, [&cs, r]() -> Status {
      if (cs.broken) return aborted("another rank of this NCCL op failed");
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(cs.comm[r], &async);
      if (async != ncclSuccess && async != ncclInProgress) return nccl_error("NCCL", async, cs.comm[r]);
      return Status::ok();
    });
  if (!st.is_ok()) abort_own(cs, r);
  return st;
}

// What went wrong among the ranks' answers, named by rank and device: the first real cause, since
// a rank that gave up because another failed says only "aborted".
Status first_cause(const std::vector<int>& devices, const std::vector<Status>& answers) {
  Status cause, echo;
  for (std::size_t r = 0; r < answers.size(); ++r) {
    if (answers[r].is_ok()) continue;
    Status& slot = is_aborted(answers[r]) ? echo : cause;
    if (slot.is_ok()) slot = in_context("rank " + std::to_string(r) + " (cuda:" + std::to_string(devices[r]) + ")", answers[r]);
  }
  return cause.is_ok() ? echo : cause;
}

} // namespace

bool nccl_supports(const DeviceCollective& c) {
  if (c.peers.size() < 2 || !nccl_type(c.dtype)) return false;
  std::set<int> devices;
  for (auto& p : c.peers) devices.insert(p.device);
  if (devices.size() != c.peers.size()) return false;  // logical peers share a GPU: plan path
  const bool reduces = c.kind == OpKind::all_reduce || c.kind == OpKind::reduce || c.kind == OpKind::reduce_scatter;
  if (reduces && !nccl_op(c.redop, c.dtype)) return false;
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
        if (p.in != at(p.out, r * b)) return false;
        break;
      case OpKind::reduce_scatter:
        if (p.out != at(p.in, r * b)) return false;
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

} // namespace chorus::gpu
