#include "cuda/nccl_rank_op.hpp"

#include "cuda/byte_at.hpp"
#include "cuda/device_status.hpp"
#include "cuda/poll.hpp"

namespace chorus::gpu {

namespace {
// A non-blocking NCCL call in progress is looked at this often (there is nothing to sleep on).
constexpr PollPace kNcclPace{std::chrono::microseconds(0), std::chrono::microseconds(20)};
const char* const kAborted = "aborted: ";
bool reduces(OpKind k) { return k == OpKind::all_reduce || k == OpKind::reduce || k == OpKind::reduce_scatter; }
} // namespace

std::optional<NcclRedOp> nccl_red_op(ReduceOp op, DType t) {
  switch (op) {
    case ReduceOp::sum: return NcclRedOp::sum;
    case ReduceOp::avg: return is_floating(t) ? NcclRedOp::avg : NcclRedOp::sum;
    case ReduceOp::prod: return NcclRedOp::prod;
    case ReduceOp::min: return is_floating(t) ? std::nullopt : std::optional(NcclRedOp::min);
    case ReduceOp::max: return is_floating(t) ? std::nullopt : std::optional(NcclRedOp::max);
    default: return std::nullopt;
  }
}

bool nccl_serves(OpKind kind, DType t, ReduceOp op) { return !reduces(kind) || nccl_red_op(op, t).has_value(); }

NcclState enqueue_rank(NcclCalls& calls, const NcclRankOp& op, NcclComm comm, Stream s) {
  const int r = op.rank, root = op.root;
  const std::size_t count = op.count, block = count * dtype_size(op.dtype);
  const DType t = op.dtype;
  switch (op.kind) {
    case OpKind::all_reduce: return calls.all_reduce(op.in, op.out, count, t, *nccl_red_op(op.redop, t), comm, s);
    case OpKind::reduce:
      return calls.reduce(op.in, r == root ? op.out : nullptr, count, t, *nccl_red_op(op.redop, t), root, comm, s);
    case OpKind::reduce_scatter:
      return calls.reduce_scatter(op.in, op.out, count, t, *nccl_red_op(op.redop, t), comm, s);
    case OpKind::all_gather: return calls.all_gather(op.in, op.out, count, t, comm, s);
    case OpKind::broadcast:
    case OpKind::send:
    case OpKind::recv: return calls.broadcast(r == root ? op.in : op.out, op.out, count, t, root, comm, s);
    case OpKind::all_to_all:
    case OpKind::gather:
    case OpKind::scatter: break;
    case OpKind::barrier: return {};
  }
  // The exchange ops as grouped sends and receives; a rank's own block is a local copy.
  if (NcclState g = calls.group_start(); !g.ok()) return g;
  NcclState res;
  auto self_copy = [&](void* dst, const void* src) {
    if (dst == src) return;
    if (Status c = calls.copy(dst, src, block, s); !c.is_ok()) res = NcclState::fail(c.message());
  };
  for (int j = 0; j < op.nranks && res.ok(); ++j) {
    const std::size_t off = static_cast<std::size_t>(j) * block;
    if (op.kind == OpKind::all_to_all) {
      if (j == r) {
        self_copy(byte_at(op.out, off), byte_at(op.in, off));
        continue;
      }
      if (res = calls.send(byte_at(op.in, off), count, t, j, comm, s); !res.ok()) break;
      res = calls.recv(byte_at(op.out, off), count, t, j, comm, s);
    } else if (op.kind == OpKind::gather) {
      if (r != root) {
        if (j == root) res = calls.send(op.in, count, t, root, comm, s);
      } else if (j == r) {
        self_copy(byte_at(op.out, off), op.in);
      } else {
        res = calls.recv(byte_at(op.out, off), count, t, j, comm, s);
      }
    } else {  // scatter
      if (r != root) {
        if (j == root) res = calls.recv(op.out, count, t, root, comm, s);
      } else if (j == r) {
        self_copy(op.out, byte_at(op.in, off));
      } else {
        res = calls.send(byte_at(op.in, off), count, t, j, comm, s);
      }
    }
  }
  // The group is ended whatever happened inside it (NCCL's group state is per thread).
  NcclState end = calls.group_end();
  return res.ok() ? end : res;
}

Status finish_rank(NcclCalls& calls, const NcclRankOp& op, Stream s) {
  if (op.redop != ReduceOp::avg || is_floating(op.dtype) || !reduces(op.kind) ||
      !holds_reduction(op.kind, op.rank, op.root))
    return Status::ok();
  return calls.divide(op.dtype, op.out, op.count, static_cast<std::size_t>(op.nranks), s);
}

Status settle(NcclCalls& calls, NcclComm comm, NcclState st, Clock::time_point deadline, const std::string& what,
              const char* late, const std::function<Status()>& stop) {
  auto done = [&] {
    if (st.kind == NcclState::in_progress) st = calls.state(comm);
    return st.kind != NcclState::in_progress;
  };
  if (Status s = poll_until(done, stop, deadline, kNcclPace, late); !s.is_ok()) return s;
  return st.ok() ? Status::ok() : device_error(what + ": " + st.error);
}

Status aborted(const std::string& why) { return device_error(kAborted + why); }
bool is_aborted(const Status& s) { return s.message().rfind(kAborted, 0) == 0; }

Status first_cause(const std::vector<std::string>& who, const std::vector<Status>& answers) {
  Status cause, echo;
  for (std::size_t r = 0; r < answers.size(); ++r) {
    if (answers[r].is_ok()) continue;
    Status& slot = is_aborted(answers[r]) ? echo : cause;
    if (slot.is_ok()) slot = in_context(who[r], answers[r]);
  }
  return cause.is_ok() ? echo : cause;
}

} // namespace chorus::gpu
