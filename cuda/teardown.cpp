// gpu::release_all with CUDA: the GPU layer lets go of what it keeps, users of the device actors
// first (their last tasks run on the actors), the actors themselves last.
#include <exception>

#include "core/log.hpp"
#include "cuda/device_worker.hpp"
#include "cuda/gpu.hpp"
#include "cuda/ipc_calls.hpp"
#include "cuda/nccl_collective.hpp"
#include "cuda/staging.hpp"
#include "cuda/stream_calls.hpp"

namespace chorus::gpu {

bool release_all(Clock::time_point deadline) noexcept {
  try {
    const std::size_t sets = release_nccl_sets(deadline);
    const std::size_t mappings = release_ipc_mappings();
    const bool marks = release_stream_marks();
    const std::size_t pinned = release_staging_buffers();
    const bool stopped = DeviceWorker::stop_all(deadline);
    CHORUS_LOG(info, cuda, LogWhere{}, "GPU layer released: " + std::to_string(sets) + " NCCL set(s), " +
                                           std::to_string(mappings) + " IPC mapping(s), " + std::to_string(pinned) +
                                           " bytes of pinned staging memory" +
                                           (marks ? "" : "; stream-ordered ops still out kept their events") +
                                           (stopped ? "" : "; a device actor was still busy"));
    return marks && stopped;
  } catch (const std::exception& e) {  // at exit or in a destructor: never throw
    CHORUS_LOG(warn, cuda, LogWhere{}, std::string("GPU layer release failed: ") + e.what());
    return false;
  }
}

Kept kept() {
  Kept k;
  k.device_actors = DeviceWorker::running_count();
  k.nccl_sets = nccl_sets_kept();
  k.ipc_mappings = ipc_mappings_kept();
  k.staging_bytes = staging_bytes_kept();
  k.stream_marks = stream_marks_kept();
  return k;
}

} // namespace chorus::gpu
