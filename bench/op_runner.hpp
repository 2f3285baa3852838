// One peer's side of the benchmarked op: buffer layout per size (nccl-tests size semantics), the
// buffers themselves, one call of the op, and the check of this peer's results.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include <chorus/chorus.hpp>
#include "options.hpp"
#include "testkit/reference.hpp"

namespace chorus::bench {

struct Layout {
  std::size_t count = 0;  // elements in the count column: the per-peer buffer, or the total buffer
  std::size_t bytes = 0;  // count x dtype size: the size column and the bytes of algbw
  std::size_t block = 0;  // per-peer block of the total-buffer ops (= count for the others)
};

// The layout of one row; `size_bytes` is the requested size (rounded down to whole elements, and
// for total-buffer ops to a multiple of the peer count).
Layout layout_for(BenchOp op, DType dtype, uint32_t peers, std::size_t size_bytes);

// Bytes of input and output buffers all peers together allocate for one layout.
std::size_t host_bytes(BenchOp op, DType dtype, uint32_t peers, const Layout& l);

class OpRunner {
 public:
  OpRunner(const Options& o, Peer& peer, uint32_t rank);

  // Allocates this peer's buffers for a layout (outside any timing) and fills the inputs. With
  // --device cuda the op's buffers live on GPU rank mod --gpus, and host mirrors carry the
  // patterns in and the results out (throws std::runtime_error when GPU memory cannot be had).
  void prepare(const Layout& l);
  // One call of the op. Allocation-free on the benchmark's side.
  Status run();
  // Fresh inputs and sentinel-filled outputs, for the checked call.
  void reset_for_check();
  // Wrong elements of this peer after the checked call: results against the reference, and
  // inputs the op must leave untouched (GPU buffers are copied back to the host mirrors first).
  std::size_t count_wrong();
  // Drops the buffers.
  void release();

 private:
  bool sends() const;     // send_recv: this peer sends
  bool receives() const;  // send_recv: this peer receives
  uint32_t partner() const;

  const Options& o_;
  Peer& peer_;
  uint32_t rank_;
  uint32_t n_;
  ref::Pattern pattern_;
  ref::Reference reference_;
  Layout layout_;
  Tensor in_, out_, none_;  // what the op gets (GPU memory with --device cuda)
  Tensor hin_, hout_;       // host mirrors: the same tensors on the cpu device
};

} // namespace chorus::bench
