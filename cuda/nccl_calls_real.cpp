// NCCL itself behind the seam of cuda/nccl_calls.hpp: each call forwards to NCCL or CUDA, the
// device actors are cuda/device_worker.hpp's, and an NCCL error carries NCCL's text and the
// communicator's last error.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>

#include "cuda/cuda_error.hpp"
#include "cuda/device_status.hpp"
#include "cuda/device_worker.hpp"
#include "cuda/gpu.hpp"
#include "cuda/nccl_calls.hpp"
#include "cuda/reduce_kernel.hpp"

namespace chorus::gpu {

namespace {

static_assert(sizeof(ncclUniqueId) == kNcclIdBytes, "NCCL_UNIQUE_ID_BYTES changed");

ncclDataType_t nccl_type(DType t) {
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
  return ncclFloat32;
}

ncclRedOp_t nccl_op(NcclRedOp op) {
  switch (op) {
    case NcclRedOp::sum: return ncclSum;
    case NcclRedOp::prod: return ncclProd;
    case NcclRedOp::min: return ncclMin;
    case NcclRedOp::max: return ncclMax;
    case NcclRedOp::avg: return ncclAvg;
  }
  return ncclSum;
}

ncclComm_t as_comm(NcclComm c) { return static_cast<ncclComm_t>(c); }
cudaStream_t as_stream(Stream s) { return static_cast<cudaStream_t>(s); }

NcclState state_of(ncclResult_t r, ncclComm_t comm = nullptr) {
  if (r == ncclSuccess) return {};
  if (r == ncclInProgress) return {NcclState::in_progress, {}};
  std::string s = ncclGetErrorString(r);
  if (comm) {
    const char* last = ncclGetLastError(comm);
    if (last && *last) s += std::string(" (") + last + ")";
  }
  return NcclState::fail(std::move(s));
}

class RealNccl final : public NcclCalls {
 public:
  std::string name() const override {
    int v = 0;
    ncclGetVersion(&v);
    return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
  }
  int device_count() override { return gpu::device_count(); }
  TaskQueue::Ticket submit(int device, TaskQueue::Task task) override {
    return DeviceWorker::of(device).submit(std::move(task));
  }
  Status wait(int device, const TaskQueue::Ticket& t, Clock::time_point deadline, const std::string& what,
              bool abandon) override {
    return DeviceWorker::of(device).wait(t, deadline, what, abandon);
  }
  Status unique_id(NcclId& id) override {
    ncclUniqueId u;
    if (ncclResult_t r = ncclGetUniqueId(&u); r != ncclSuccess)
      return device_error(std::string("ncclGetUniqueId: ") + ncclGetErrorString(r));
    std::memcpy(id.data(), u.internal, kNcclIdBytes);
    return Status::ok();
  }
  Stream stream(int device) override { return DeviceWorker::of(device).stream(); }
  NcclState init_rank(NcclComm& comm, int nranks, const NcclId& id, int rank) override {
    ncclUniqueId u;
    std::memcpy(u.internal, id.data(), kNcclIdBytes);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t c = nullptr;
    const ncclResult_t r = ncclCommInitRankConfig(&c, nranks, u, rank, &config);
    comm = c;
    return state_of(r, c);
  }
  NcclState state(NcclComm comm) override {
    ncclResult_t async = ncclSuccess;
    if (ncclResult_t r = ncclCommGetAsyncError(as_comm(comm), &async); r != ncclSuccess) return state_of(r);
    return state_of(async, as_comm(comm));
  }
  void abort(NcclComm comm) override {
    if (comm) ncclCommAbort(as_comm(comm));
  }
  NcclState all_reduce(const void* in, void* out, std::size_t count, DType t, NcclRedOp op, NcclComm comm,
                       Stream s) override {
    return state_of(ncclAllReduce(in, out, count, nccl_type(t), nccl_op(op), as_comm(comm), as_stream(s)));
  }
  NcclState reduce(const void* in, void* out, std::size_t count, DType t, NcclRedOp op, int root, NcclComm comm,
                   Stream s) override {
    return state_of(ncclReduce(in, out, count, nccl_type(t), nccl_op(op), root, as_comm(comm), as_stream(s)));
  }
  NcclState broadcast(const void* in, void* out, std::size_t count, DType t, int root, NcclComm comm,
                      Stream s) override {
    return state_of(ncclBroadcast(in, out, count, nccl_type(t), root, as_comm(comm), as_stream(s)));
  }
  NcclState all_gather(const void* in, void* out, std::size_t count, DType t, NcclComm comm, Stream s) override {
    return state_of(ncclAllGather(in, out, count, nccl_type(t), as_comm(comm), as_stream(s)));
  }
  NcclState reduce_scatter(const void* in, void* out, std::size_t count, DType t, NcclRedOp op, NcclComm comm,
                           Stream s) override {
    return state_of(ncclReduceScatter(in, out, count, nccl_type(t), nccl_op(op), as_comm(comm), as_stream(s)));
  }
  NcclState send(const void* buf, std::size_t count, DType t, int peer, NcclComm comm, Stream s) override {
    return state_of(ncclSend(buf, count, nccl_type(t), peer, as_comm(comm), as_stream(s)));
  }
  NcclState recv(void* buf, std::size_t count, DType t, int peer, NcclComm comm, Stream s) override {
    return state_of(ncclRecv(buf, count, nccl_type(t), peer, as_comm(comm), as_stream(s)));
  }
  NcclState group_start() override { return state_of(ncclGroupStart()); }
  NcclState group_end() override { return state_of(ncclGroupEnd()); }
  Status copy(void* dst, const void* src, std::size_t bytes, Stream s) override {
    const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, as_stream(s));
    return e == cudaSuccess ? Status::ok() : cuda_error("cudaMemcpyAsync", e);
  }
  Status divide(DType t, void* buf, std::size_t count, std::size_t divisor, Stream s) override {
    void* dst[1] = {buf};
    const void* src[1] = {buf};
    return launch_reduce(s, t, ReduceOp::sum, dst, 1, src, 1, count, divisor);
  }
  Status synchronize(int device, Clock::time_point deadline, const std::function<Status()>& watch) override {
    return DeviceWorker::of(device).synchronize(deadline, watch);
  }
};

} // namespace

NcclCalls* real_nccl_calls() {
  static auto* calls = new RealNccl;  // never destroyed: device actors outlive main
  return calls;
}

} // namespace chorus::gpu
