// Data-parallel gradient sync (DDP / Horovod style) on top of a registered Peer, modelled on burn's
// DistributedSyncServer: each device registers the parameters it will produce gradients for and how
// many gradient contributions each gets per step, submits gradients as they become ready (in any
// order), and calls sync() at the end of the backward pass.
//
// Fusion buckets: parameters are packed, in REGISTRATION ORDER, into buckets of at most
// `bucket_bytes` bytes. Like PyTorch DDP (which walks model.parameters() in reverse), register the
// parameters in the order their gradients are expected to become ready (for a layered model: last
// layer first) so that early buckets fill early and their all-reduce overlaps the rest of the
// backward pass. A bucket holds one dtype: a parameter of another dtype than the open bucket closes
// it. A parameter larger than the threshold gets a bucket of its own; threshold 0 = one bucket per
// parameter (unfused).
//
// Communication: each GradientSync owns one communication thread that all-reduces the buckets
// strictly in bucket-index order (bucket k waits until every parameter of bucket k has all its
// contributions on this device), in place in the bucket's fusion buffer, so that the k-th
// collective call of every device belongs to the same bucket. Contributions of one parameter are
// summed locally into the fusion buffer before the all-reduce.
//
// sync() waits until every bucket of the step is reduced, copies the result back into every tensor
// submitted for the parameter (handles share storage with the caller's), and resets for the next
// step. While the step runs, the GradientSync owns the Peer: do not issue other collectives on the
// same Peer between the first submit() and the return of sync().
//
// Errors (Status, never a crash): unknown id, dtype/element-count mismatch, more submissions than
// contributions_per_step ("submitted twice"), a parameter set that differs between devices
// (invalid_argument on every device naming the first differing parameter id), and a device that
// never submits a parameter (sync() fails with Errc::timeout naming the missing parameter ids; the
// other devices get the all-reduce's timeout naming the peer). After a failed sync() the step is
// abandoned and the GradientSync is reset, but the collective's op numbering may differ between
// devices: reset the Runtime before reusing the peers.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <chorus/peer.hpp>
#include <chorus/result.hpp>
#include <chorus/status.hpp>
#include <chorus/tensor.hpp>

namespace chorus {

struct ParamSpec {
  uint64_t id = 0;
  DType dtype = DType::f32;
  std::size_t numel = 0;
  uint32_t contributions_per_step = 1;  // gradients submitted per step; summed locally
};

struct GradSyncOptions {
  std::size_t bucket_bytes = 25u << 20;  // fusion threshold (PyTorch DDP's default bucket_cap_mb=25)
  ReduceOp op = ReduceOp::avg;           // sum or avg (mean over devices)
  // How long sync() waits for this device's own missing gradients. Use the collective's timeout
  // (Config::timeout): the all-reduce on the other devices gives up after that long.
  std::chrono::milliseconds timeout{30000};
  bool copy_back = true;  // sync() writes the result into the submitted tensors
  // Where the gradients live: the fusion buffers are allocated there and every submitted gradient
  // must be on it (GPU gradients are packed, summed and reduced on the GPU; across nodes they go
  // through host memory like every GPU op there).
  Device device = Device::cpu();
};

struct BucketPlan {
  DType dtype = DType::f32;
  std::vector<uint64_t> param_ids;  // in registration order
  std::vector<std::size_t> offsets; // element offset of each parameter in the fusion buffer
  std::size_t numel = 0;
  std::size_t bytes() const { return numel * dtype_size(dtype); }
};

// The bucket assignment GradientSync uses (pure; exposed for tests and tools).
std::vector<BucketPlan> plan_buckets(const std::vector<ParamSpec>& params, std::size_t bucket_bytes);

class GradientSync {
 public:
  // `peer` must outlive this object and be registered.
  explicit GradientSync(Peer& peer, GradSyncOptions options = {});
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // Collective: every device calls it with the same list (same order, ids, dtypes, sizes,
  // contributions) and the same bucket_bytes / op. Fails on every device otherwise (a failed call
  // leaves the previous registration, if any, in place). Not during a step.
  Status register_params(std::vector<ParamSpec> params);
  // Hands one gradient contribution of parameter `id` to the sync. grad must have the registered
  // dtype and element count and stay alive (its storage) until sync() returns.
  Status submit(uint64_t id, const Tensor& grad);
  // Waits until every bucket of the step is reduced; copies back; resets for the next step.
  Status sync();
  // Between steps (after sync(), failed or not): runs the next steps on `peer`, the world after a
  // shrink or a grow (docs/elastic.md); with op avg the average is then over its members. The
  // registration stays; after a grow the members and the newcomers call register_params again
  // (it is collective). `peer` must outlive this object, or the next set_peer.
  Status set_peer(Peer& peer);

  // The reduced gradient of `id` after the last successful sync(): a view into the fusion buffer,
  // valid until the next submit of that parameter.
  Result<Tensor> reduced(uint64_t id) const;
  const std::vector<BucketPlan>& buckets() const { return buckets_; }
  // The bucket a parameter is in (-1 when unknown).
  int bucket_of(uint64_t id) const;

 private:
  struct ParamState {
    ParamSpec spec;
    std::size_t bucket = 0;
    std::size_t offset = 0;       // elements into the bucket buffer
    uint32_t submitted = 0;       // contributions this step
    std::vector<Tensor> targets;  // submitted tensors, written back at sync()
  };
  void comm_loop();
  // The parameter's range of its bucket's fusion buffer, as a tensor on the sync's device.
  Tensor slot_of(const ParamState& ps) const;
  void reset_step_locked();
  std::string missing_params_locked() const;

  Peer* peer_;
  GradSyncOptions opts_;
  bool registered_ = false;
  std::vector<BucketPlan> buckets_;
  std::vector<Tensor> buffers_;               // one fusion buffer per bucket
  std::vector<std::size_t> pending_;          // parameters of bucket k still incomplete
  std::unordered_map<uint64_t, std::size_t> index_;  // id -> params_ index
  std::vector<ParamState> params_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::size_t next_bucket_ = 0;  // next bucket the comm thread reduces
  bool in_flight_ = false;       // comm thread inside an all_reduce
  bool step_started_ = false;
  Status step_error_;            // first all_reduce failure of the step
  bool stop_ = false;
  std::thread comm_;
};

} // namespace chorus
