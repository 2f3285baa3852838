// An op in flight (torch.distributed's Work, MPI's request): every `_async` op of a Peer returns
// one at once, and the blocking form of each op is the same op's wait(). The op runs whether or
// not anyone waits for it: a Work dropped before wait() still completes its op (its buffers must
// stay alive until then, as for any op in flight).
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <chorus/result.hpp>
#include <chorus/status.hpp>
#include <chorus/tensor.hpp>
#include <chorus/types.hpp>

namespace chorus {

struct WorkState;

// What one op may set for itself, beside the peer's Config.
struct OpOptions {
  // How long this peer waits for the others to call, from the op's start; zero: Config::timeout.
  // Like Config::timeout it is this peer's bound: peers of one op may give different ones, and the
  // first to run out fails the op for everyone, naming who never called. In one process it bounds
  // the op's run too (the plan, once everyone called, ends by the shortest bound among them,
  // counted from then); across nodes, once every node called, the transfers end by the shortest
  // OpOptions::timeout any node's peers gave, counted from then, on every node (none waits past
  // its own bound; docs/work.md, "Per-op timeouts").
  std::chrono::milliseconds timeout{0};
  // A CUDA stream (a cudaStream_t) to order the op in, as NCCL does: the op starts once the work
  // queued on the stream before the call is done, and work queued on it after the call waits for
  // the op, while the calling thread goes on at once. Work::wait() still waits on the host. Any op
  // may be ordered so (its tensors may live anywhere); the waiting is bounded by `timeout` like
  // the op's, and the stream goes on past the op however it ends (check the Work for the outcome).
  // Null: none (CUDA's default stream, whose handle is null, is named cudaStreamLegacy here). An op
  // given a stream in a build without CUDA fails with Errc::device_error.
  void* stream = nullptr;
};

class Work {
 public:
  Work() = default;  // empty: wait() says so (Errc::invalid_argument)
  bool valid() const { return state_ != nullptr; }

  // Waits until the op is done and returns how it ended (the blocking form's Status).
  Status wait() const;
  // The same, up to `limit`: Errc::timeout with "still in flight" when the op is not done by then;
  // the op goes on and may be waited for again. (The op's own timeout is OpOptions::timeout.)
  Status wait_for(std::chrono::milliseconds limit) const;
  // True once the op is done (never blocks).
  bool test() const;
  // What the op gives back once done, after wait() (an error Status if it failed or is not done):
  // the output tensors the op wrote (the rooted and fixed-size ops: their output buffer, empty
  // where this peer receives nothing), the tensor a by-data broadcast or scatter delivered, or
  // every rank's tensor of all_gather_v / gather_v.
  Result<std::vector<Tensor>> result() const;
  // Object collectives: every rank's bytes (all_gather_object) or the one payload
  // (broadcast_object), after wait().
  Result<std::vector<std::string>> objects() const;
  // A receive's sender (its rank in the group), after wait(): the rank a recv_any took its
  // message from, or a recv's `src`. An error for other ops, or if the receive failed.
  Result<PeerId> source() const;
  // Calls `fn` once with the op's Status when it is done: at once, on this thread, if it is done
  // already; else on the thread that completes it, before the handle's next op starts (keep it
  // short). An op of the same handle called from `fn` fails with Errc::invalid_argument (its place
  // among the handle's ops would depend on timing), as do its finish() and destroy(), and a wait()
  // for a later op of the handle (that op starts only after `fn` returned); other handles are fine.
  void on_complete(std::function<void(const Status&)> fn) const;

 private:
  friend struct WorkAccess;  // the library's own code (engine/work_state.hpp)
  explicit Work(std::shared_ptr<WorkState> s) : state_(std::move(s)) {}
  std::shared_ptr<WorkState> state_;
};

} // namespace chorus
