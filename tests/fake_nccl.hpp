// A test double of NCCL behind cuda/nccl_calls.hpp, for machines without a GPU. "GPU memory" is
// host memory; each node process of a job is one FakeNccl, and the nodes of one test share a
// FakeFabric (what NCCL's transport would be). Each device is a thread serving a TaskQueue, as a
// device actor is. Collectives meet by sequence number in their communicator and run when every
// rank has entered them (checking that every rank called the same one); sends are copied out when
// posted and received when the stream is synchronized. Every call is logged as one line
// ("node 1 cuda:0 ncclAllReduce rank 2/6 count 4 f32 sum"), so that tests assert the sequence; a
// call made off its device's thread is logged as a VIOLATION.
//
// Like NCCL, a rank that aborts tells nobody: the others wait until their deadline, or until told.
//
// Beside it, for tests that run several nodes' Runtimes in one process with one double in place:
// NoGpusOnThisThread (a node that counts no GPUs when it registers) and HostMemoryAsGpus (the
// double's "GPU memory" copied as the host memory it is, so that staging through host memory works).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/device_memory.hpp"
#include "cuda/nccl_calls.hpp"

namespace chorus::fake {

class FakeFabric {
 public:
  struct Comm;
  FakeFabric();
  ~FakeFabric();
  uint64_t new_id();
  // The communicator of the id (made by its first rank), or nullptr and `error`.
  std::shared_ptr<Comm> join(uint64_t id, int nranks, std::string& error);

  void note(std::string line);
  std::vector<std::string> log() const;
  // Lines that contain every one of `parts`.
  std::size_t count(const std::vector<std::string>& parts) const;
  void clear_log();

 private:
  mutable std::mutex mu_;
  uint64_t next_id_ = 0;
  std::vector<std::pair<uint64_t, std::weak_ptr<Comm>>> comms_;
  std::vector<std::string> log_;
};

class FakeNccl final : public gpu::NcclCalls {
 public:
  FakeNccl(FakeFabric& fabric, uint32_t node, int devices);
  ~FakeNccl() override;

  std::string name() const override { return "fake NCCL (node " + std::to_string(node_) + ")"; }
  // Its devices, or 0 on a thread that holds a NoGpusOnThisThread.
  int device_count() override;
  gpu::TaskQueue::Ticket submit(int device, gpu::TaskQueue::Task task) override;
  Status wait(int device, const gpu::TaskQueue::Ticket& t, Clock::time_point deadline, const std::string& what,
              bool abandon) override;
  Status unique_id(gpu::NcclId& id) override;
  gpu::Stream stream(int device) override;
  gpu::NcclState init_rank(gpu::NcclComm& comm, int nranks, const gpu::NcclId& id, int rank) override;
  gpu::NcclState state(gpu::NcclComm comm) override;
  void abort(gpu::NcclComm comm) override;
  gpu::NcclState all_reduce(const void* in, void* out, std::size_t count, DType t, gpu::NcclRedOp op,
                            gpu::NcclComm comm, gpu::Stream s) override;
  gpu::NcclState reduce(const void* in, void* out, std::size_t count, DType t, gpu::NcclRedOp op, int root,
                        gpu::NcclComm comm, gpu::Stream s) override;
  gpu::NcclState broadcast(const void* in, void* out, std::size_t count, DType t, int root, gpu::NcclComm comm,
                           gpu::Stream s) override;
  gpu::NcclState all_gather(const void* in, void* out, std::size_t count, DType t, gpu::NcclComm comm,
                            gpu::Stream s) override;
  gpu::NcclState reduce_scatter(const void* in, void* out, std::size_t count, DType t, gpu::NcclRedOp op,
                                gpu::NcclComm comm, gpu::Stream s) override;
  gpu::NcclState send(const void* buf, std::size_t count, DType t, int peer, gpu::NcclComm comm,
                      gpu::Stream s) override;
  gpu::NcclState recv(void* buf, std::size_t count, DType t, int peer, gpu::NcclComm comm, gpu::Stream s) override;
  gpu::NcclState group_start() override;
  gpu::NcclState group_end() override;
  Status copy(void* dst, const void* src, std::size_t bytes, gpu::Stream s) override;
  Status divide(DType t, void* buf, std::size_t count, std::size_t divisor, gpu::Stream s) override;
  Status synchronize(int device, Clock::time_point deadline, const std::function<Status()>& watch) override;

  // From now on, collectives of `device`'s ranks never complete (as on a GPU whose kernel hangs);
  // -1: none.
  void hold(int device) { held_ = device; }

  struct Rank;
  struct Lane;

 private:
  Lane& lane(int device);
  // "node N cuda:D " for the calling lane (checks that a call about `device` runs on its thread).
  std::string where(int device);
  gpu::NcclState collective(const char* name, int kind, const void* in, void* out, std::size_t count, DType t,
                            int op, int root, gpu::NcclComm comm, gpu::Stream s);

  FakeFabric& fabric_;
  const uint32_t node_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::atomic<int> held_{-1};
  std::mutex ranks_mu_;
  std::vector<std::unique_ptr<Rank>> ranks_;  // every handle made, freed with the fake
};

// While one lives, device_count() of every double answers 0 on the thread that made it. A node
// counts its GPUs when it registers, on the thread of its first register_peer: a node whose
// registering threads hold one registers without GPUs, as a node process on a machine without any.
class NoGpusOnThisThread {
 public:
  NoGpusOnThisThread();
  ~NoGpusOnThisThread();
  NoGpusOnThisThread(const NoGpusOnThisThread&) = delete;
  NoGpusOnThisThread& operator=(const NoGpusOnThisThread&) = delete;

 private:
  bool before_;
};

// GPU memory as the double has it: host memory. Installed for its life (core/device_memory.hpp;
// the table before it is put back), so that a GPU tensor staged through host memory is copied
// like host memory and the op runs on a host schedule. Counts the copies to or from a "GPU".
class HostMemoryAsGpus final : public DeviceMemory {
 public:
  HostMemoryAsGpus();
  ~HostMemoryAsGpus() override;
  HostMemoryAsGpus(const HostMemoryAsGpus&) = delete;
  HostMemoryAsGpus& operator=(const HostMemoryAsGpus&) = delete;

  Status allocate(int device, std::size_t bytes, void** out) override;
  void release(int device, void* p) noexcept override;
  Status copy(void* dst, int dst_device, const void* src, int src_device, std::size_t bytes) override;
  Status memset_zero(int device, void* p, std::size_t bytes) override;
  std::size_t copies() const { return copies_.load(); }

 private:
  DeviceMemory* before_;
  std::atomic<std::size_t> copies_{0};
};

} // namespace chorus::fake
