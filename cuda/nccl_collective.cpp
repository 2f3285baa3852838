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
#include <thread>
#include <vector>

#include "cuda/device_worker.hpp"
#include "cuda/gpu.hpp"
#include "cuda/reduce_kernel.hpp"

namespace chorus::gpu {

namespace {

using Clock = std::chrono::steady_clock;

std::string nccl_error(const std::string& what, ncclResult_t r, ncclComm_t comm = nullptr) {
  std::string s = what + ": " + ncclGetErrorString(r);
  if (comm) {
    const char* last = ncclGetLastError(comm);
    if (last && *last) s += std::string(" (") + last + ")";
  }
  return s;
}

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

// avg runs as sum and divides afterwards with our kernel (integers divide truncating, as on host).
std::optional<ncclRedOp_t> nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return ncclSum;
    case ReduceOp::prod: return ncclProd;
    case ReduceOp::min: return ncclMin;
    case ReduceOp::max: return ncclMax;
    default: return std::nullopt;  // bitwise ops: not in NCCL, served by the plan path
  }
}

// The communicators of one GPU set; `broken` once an op failed on them.
struct Comms {
  std::vector<int> devices;
  std::vector<ncclComm_t> comm;
  std::atomic<bool> broken{false};
  void abort_all() {
    if (broken.exchange(true)) return;
    for (auto c : comm)
      if (c) ncclCommAbort(c);  // safe from any thread; wakes kernels waiting on a peer
  }
};

std::mutex comms_mu;
std::map<std::vector<int>, std::shared_ptr<Comms>> comms_cache;

std::shared_ptr<Comms> comms_for(const std::vector<int>& devices, Clock::time_point deadline, std::string& error) {
  std::lock_guard<std::mutex> lk(comms_mu);
  auto it = comms_cache.find(devices);
  if (it != comms_cache.end() && !it->second->broken) return it->second;
  if (it != comms_cache.end()) comms_cache.erase(it);  // aborted communicators are not reused
  ncclUniqueId id;
  if (auto r = ncclGetUniqueId(&id); r != ncclSuccess) {
    error = nccl_error("ncclGetUniqueId", r);
    return nullptr;
  }
  auto cs = std::make_shared<Comms>();
  cs->devices = devices;
  cs->comm.assign(devices.size(), nullptr);
  const int n = static_cast<int>(devices.size());
  std::vector<DeviceWorker::Ticket> tickets;
  for (int r = 0; r < n; ++r) {
    DeviceWorker& w = DeviceWorker::of(devices[r]);
    // Every rank's init blocks until all ranks joined, so they run on all actors at once.
    tickets.push_back(w.submit([cs, id, n, r]() -> std::string {
      ncclComm_t c = nullptr;
      if (auto res = ncclCommInitRank(&c, n, id, r); res != ncclSuccess) return nccl_error("ncclCommInitRank", res);
      cs->comm[r] = c;
      return {};
    }));
  }
  for (int r = 0; r < n; ++r) {
    std::string e = DeviceWorker::of(devices[r]).wait(tickets[r], deadline, "NCCL communicator setup");
    if (!e.empty() && error.empty()) error = e;
  }
  if (!error.empty()) {
    cs->abort_all();
    return nullptr;
  }
  comms_cache[devices] = cs;
  return cs;
}

char* at(void* p, std::size_t off) { return static_cast<char*>(p) + off; }
const char* at(const void* p, std::size_t off) { return static_cast<const char*>(p) + off; }

// Rank r's calls for the op, enqueued on stream s.
ncclResult_t enqueue(const DeviceCollective& c, int r, ncclComm_t comm, cudaStream_t s) {
  const auto& me = c.peers[r];
  const ncclDataType_t t = *nccl_type(c.dtype);
  const std::size_t n = c.peers.size(), count = c.count, block = count * dtype_size(c.dtype);
  const int root = c.root;
  switch (c.kind) {
    case OpKind::all_reduce: return ncclAllReduce(me.in, me.out, count, t, *nccl_op(c.redop), comm, s);
    case OpKind::reduce:
      return ncclReduce(me.in, r == root ? me.out : nullptr, count, t, *nccl_op(c.redop), root, comm, s);
    case OpKind::reduce_scatter: return ncclReduceScatter(me.in, me.out, count, t, *nccl_op(c.redop), comm, s);
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
    if (dst != src && cudaMemcpyAsync(dst, src, block, cudaMemcpyDeviceToDevice, s) != cudaSuccess)
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

// Waits for rank r's work: the stream drains, an asynchronous NCCL error shows, or the deadline.
std::string await(cudaStream_t s, cudaEvent_t ev, ncclComm_t comm, const Comms& cs, Clock::time_point deadline) {
  if (auto e = cudaEventRecord(ev, s); e != cudaSuccess) return std::string("cudaEventRecord: ") + cudaGetErrorString(e);
  for (int spins = 0;; ++spins) {
    cudaError_t q = cudaEventQuery(ev);
    if (q == cudaSuccess) return {};
    if (q != cudaErrorNotReady) return std::string("CUDA: ") + cudaGetErrorName(q) + " (" + cudaGetErrorString(q) + ")";
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm, &async);
    if (async != ncclSuccess && async != ncclInProgress) return nccl_error("NCCL", async, comm);
    if (cs.broken) return "aborted: another rank of this NCCL op failed";
    if (Clock::now() >= deadline) return "timeout: the NCCL op did not finish in time";
    if (spins > 2000) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

} // namespace

bool nccl_supports(const DeviceCollective& c) {
  if (c.peers.size() < 2 || !nccl_type(c.dtype)) return false;
  std::set<int> devices;
  for (auto& p : c.peers) devices.insert(p.device);
  if (devices.size() != c.peers.size()) return false;  // logical peers share a GPU: plan path
  const bool reduces = c.kind == OpKind::all_reduce || c.kind == OpKind::reduce || c.kind == OpKind::reduce_scatter;
  if (reduces && !nccl_op(c.redop)) return false;
  if (c.kind == OpKind::all_to_all)  // in place would read blocks already received
    for (auto& p : c.peers)
      if (p.in == p.out) return false;
  return true;
}

std::string run_nccl(const DeviceCollective& c, Clock::time_point deadline) {
  std::vector<int> devices;
  for (auto& p : c.peers) devices.push_back(p.device);
  std::string error;
  auto cs = comms_for(devices, deadline, error);
  if (!cs) return c.label + ": " + error;
  auto op = std::make_shared<DeviceCollective>(c);
  const int n = static_cast<int>(devices.size());
  std::vector<DeviceWorker::Ticket> tickets;
  for (int r = 0; r < n; ++r) {
    DeviceWorker& w = DeviceWorker::of(devices[r]);
    tickets.push_back(w.submit([op, cs, r, &w, deadline]() -> std::string {
      auto s = static_cast<cudaStream_t>(w.stream());
      ncclComm_t comm = cs->comm[r];
      if (cs->broken) return "aborted: another rank of this NCCL op failed";
      if (auto res = enqueue(*op, r, comm, s); res != ncclSuccess) {
        cs->abort_all();
        return nccl_error(std::string(to_string(op->kind)), res, comm);
      }
      const auto& me = op->peers[r];
      const bool holds = op->kind == OpKind::all_reduce || op->kind == OpKind::reduce_scatter ||
                         (op->kind == OpKind::reduce && r == op->root);
      if (op->redop == ReduceOp::avg && holds) {
        void* dst[1] = {me.out};
        const void* src[1] = {me.out};
        if (auto e = launch_reduce(s, op->dtype, ReduceOp::sum, dst, 1, src, 1, op->count, op->peers.size());
            !e.empty()) {
          cs->abort_all();
          return e;
        }
      }
      static thread_local cudaEvent_t ev = nullptr;  // one per device actor
      if (!ev && cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) return "cudaEventCreate failed";
      std::string e = await(s, ev, comm, *cs, deadline);
      if (!e.empty()) cs->abort_all();
      return e;
    }));
  }
  for (int r = 0; r < n; ++r) {
    std::string e = DeviceWorker::of(devices[r]).wait(tickets[r], deadline, c.label);
    if (!e.empty()) {
      cs->abort_all();
      if (error.empty()) error = "rank " + std::to_string(r) + " (cuda:" + std::to_string(devices[r]) + "): " + e;
    }
  }
  return error.empty() ? error : c.label + ": " + error;
}

} // namespace chorus::gpu
