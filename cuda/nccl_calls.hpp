// The seam between chorus's NCCL paths and NCCL itself: every NCCL call they make, and the device
// actors those calls run on, behind one interface without a CUDA header. nccl_calls() is NCCL on
// this process's device actors (cuda/nccl_calls_real.cpp, built with CUDA); the tests put a double
// in its place (tests/fake_nccl.hpp) that plays the calls on host memory, so that the bootstrap,
// the caching, the abort path and every op's call sequence run on a machine without a GPU.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include <chorus/status.hpp>
#include <chorus/types.hpp>

#include "core/wait.hpp"
#include "cuda/task_queue.hpp"

namespace chorus::gpu {

inline constexpr std::size_t kNcclIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
using NcclId = std::array<unsigned char, kNcclIdBytes>;
using NcclComm = void*;  // ncclComm_t
using Stream = void*;    // cudaStream_t

// What a (non-blocking) NCCL call answered.
struct NcclState {
  enum Kind : uint8_t { done, in_progress, failed };
  Kind kind = done;
  std::string error;  // failed: NCCL's text
  bool ok() const { return kind == done; }
  static NcclState fail(std::string why) { return {failed, std::move(why)}; }
};

// The reductions NCCL has (chorus's bitwise ops and NaN-propagating float min/max are not among
// them: see nccl_red_op in cuda/nccl_rank_op.hpp).
enum class NcclRedOp : uint8_t { sum, prod, min, max, avg };

class NcclCalls {
 public:
  virtual ~NcclCalls() = default;
  // What plays NCCL: "NCCL 2.28.3", or the test double's name.
  virtual std::string name() const = 0;
  // The GPUs there are (device indexes 0 .. n-1).
  virtual int device_count() = 0;

  // The device actor of `device`: tasks run on its thread, one at a time, in order.
  virtual TaskQueue::Ticket submit(int device, TaskQueue::Task task) = 0;
  virtual Status wait(int device, const TaskQueue::Ticket& t, Clock::time_point deadline, const std::string& what,
                      bool abandon = true) = 0;

  // Any thread: ncclGetUniqueId.
  virtual Status unique_id(NcclId& id) = 0;

  // The rest only inside a task of `device`'s actor (NCCL and CUDA bind a thread to its device).
  virtual Stream stream(int device) = 0;
  // ncclCommInitRankConfig, non-blocking: `comm` is set at once, state() says when it is ready.
  virtual NcclState init_rank(NcclComm& comm, int nranks, const NcclId& id, int rank) = 0;
  virtual NcclState state(NcclComm comm) = 0;  // ncclCommGetAsyncError
  virtual void abort(NcclComm comm) = 0;       // ncclCommAbort
  virtual NcclState all_reduce(const void* in, void* out, std::size_t count, DType t, NcclRedOp op, NcclComm comm,
                               Stream s) = 0;
  virtual NcclState reduce(const void* in, void* out, std::size_t count, DType t, NcclRedOp op, int root,
                           NcclComm comm, Stream s) = 0;
  virtual NcclState broadcast(const void* in, void* out, std::size_t count, DType t, int root, NcclComm comm,
                              Stream s) = 0;
  virtual NcclState all_gather(const void* in, void* out, std::size_t count, DType t, NcclComm comm, Stream s) = 0;
  virtual NcclState reduce_scatter(const void* in, void* out, std::size_t count, DType t, NcclRedOp op, NcclComm comm,
                                   Stream s) = 0;
  virtual NcclState send(const void* buf, std::size_t count, DType t, int peer, NcclComm comm, Stream s) = 0;
  virtual NcclState recv(void* buf, std::size_t count, DType t, int peer, NcclComm comm, Stream s) = 0;
  virtual NcclState group_start() = 0;
  virtual NcclState group_end() = 0;
  // Stream-ordered helpers around NCCL's calls: a rank's own block of an exchange (cudaMemcpyAsync)
  // and the integer average's division (chorus's kernel; NCCL averages floats only).
  virtual Status copy(void* dst, const void* src, std::size_t bytes, Stream s) = 0;
  virtual Status divide(DType t, void* buf, std::size_t count, std::size_t divisor, Stream s) = 0;
  // Until `device`'s stream has done its work, `watch` returns an error (an asynchronous NCCL
  // error, another rank giving up) or `deadline` passes.
  virtual Status synchronize(int device, Clock::time_point deadline, const std::function<Status()>& watch) = 0;
};

// NCCL on this process's device actors, or the double a test put in its place; nullptr where
// chorus was built without CUDA and no double is in place.
NcclCalls* nccl_calls();
// Tests: `calls` plays NCCL (and the device actors) from now on; nullptr gives NCCL back.
void set_nccl_calls(NcclCalls* calls);
// NCCL itself (cuda/nccl_calls_real.cpp), or nullptr without CUDA (cuda/no_cuda.cpp).
NcclCalls* real_nccl_calls();

} // namespace chorus::gpu
