// One rank's part of a collective as NCCL calls, the same whether the ranks are GPUs of one process
// (cuda/nccl_collective.cpp) or of many (cuda/nccl_job.hpp): the five collectives NCCL has map one
// to one; all-to-all, gather and scatter are grouped sends and receives (a rank's own block a local
// copy); avg is ncclAvg for floats and a sum divided afterwards for integers.
#pragma once
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <chorus/types.hpp>

#include "core/op_desc.hpp"
#include "cuda/nccl_calls.hpp"

namespace chorus::gpu {

// One rank's part in an op NCCL runs (send/recv: a two-rank broadcast from `root`).
struct NcclRankOp : OpDesc {
  int nranks = 0;
  int rank = 0;
  const void* in = nullptr;  // null where the op reads nothing from this rank
  void* out = nullptr;       // null where it writes nothing here
};

// NCCL's reduction for chorus's, or none where NCCL cannot give chorus's result: bitwise ops, and
// float min/max (NCCL drops a NaN that chorus propagates).
std::optional<NcclRedOp> nccl_red_op(ReduceOp op, DType t);
// Whether NCCL can run the op at all (its reduction, where it reduces).
bool nccl_serves(OpKind kind, DType t, ReduceOp op);

// Enqueues rank op.rank's calls on stream `s` (they may answer in_progress on a non-blocking
// communicator: wait on calls.state(comm)). Precondition: nccl_serves.
NcclState enqueue_rank(NcclCalls& calls, const NcclRankOp& op, NcclComm comm, Stream s);
// What must follow on the stream once the NCCL calls are done: the integer average's division.
Status finish_rank(NcclCalls& calls, const NcclRankOp& op, Stream s);

// Waits out a non-blocking call on `comm` that answered `st`: ok once it is done, NCCL's error
// after `what`, the error of `stop()` (looked at between polls: another rank gave up) once it has
// one, or a timeout saying `late` at `deadline`.
Status settle(NcclCalls& calls, NcclComm comm, NcclState st, Clock::time_point deadline, const std::string& what,
              const char* late, const std::function<Status()>& stop);

// A rank that gives up because another failed says so with this prefix ("aborted: ..."), so that
// the op reports the first real cause rather than the echo.
Status aborted(const std::string& why);
bool is_aborted(const Status& s);
// The first real cause among the ranks' answers (else the first echo), after its rank's name.
Status first_cause(const std::vector<std::string>& who, const std::vector<Status>& answers);

} // namespace chorus::gpu
