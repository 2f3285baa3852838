// The collective a Python process is in: one chorus node of one peer, its Runtime and, on rank 0,
// the orchestrator it hosts. torch.distributed's default group makes it through the store torch
// passes every backend: rank 0 starts the orchestrator on a free port and publishes its address
// and a drawn secret there; every rank reads them and joins. Subgroups are groups of its peer.
// Where the default group has another backend (gloo, NCCL), each chorus group is a collective of
// its own, made the same way through the group's store (join_group).
#pragma once
#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chorus/peer.hpp>
#include <chorus/runtime.hpp>

namespace chorus {
class HostedOrchestrator;
}

namespace chorus::python {

class World {
 public:
  // Joins (blocking: every rank must come, within `timeout`). One World per process at a time:
  // a second while one is up is an invalid_config Error.
  static std::shared_ptr<World> join(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                     std::chrono::milliseconds timeout);
  // A newcomer to a running elastic job (chorus-run --join: CHORUS_JOIN=1 and the job's
  // orchestrator in the environment): registers and waits, up to `timeout`, until the members
  // grow; the World is then the grown world.
  static std::shared_ptr<World> join_newcomer(std::chrono::milliseconds timeout);
  // A chorus group whose members are a collective of their own (new_group(backend="chorus")
  // where the default group has another backend): `rank` of `size` in the group, its rank 0
  // hosting the orchestrator. Any number may be up at once, beside none or the World.
  static std::shared_ptr<World> join_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                           std::chrono::milliseconds timeout);
  // The World up now (the default group's), or an invalid_config Error saying why there is none.
  static std::shared_ptr<World> current();
  // Ends every World and group of its own (the interpreter's exit; ops after it raise chorus.Finished).
  static void shutdown_all();
  ~World();

  Peer peer() const {
    std::lock_guard<std::mutex> lk(mu_);
    return peer_;
  }
  // The world's next epoch (chorus.shrink, chorus.grow): subgroups are made in it from now on.
  void advance(Peer next) {
    std::lock_guard<std::mutex> lk(mu_);
    peer_ = std::move(next);
  }
  // The group of these world ranks (ascending, this rank among them): every member asks.
  Peer group(const std::vector<int64_t>& ranks);
  // Raises chorus.Finished once the World is down.
  void check_up() const;
  bool is_down() const;
  std::chrono::milliseconds timeout() const { return timeout_; }
  // This process's node, its runtime and the orchestrator it hosts go, in that order: rank 0
  // first waits (bounded) until the other nodes have left, so their last ops end undisturbed.
  void shutdown();

 private:
  World() = default;
  // The members meet through `store` (join's and join_group's common part): `own_group`, a group
  // of its own, neither takes a launcher's orchestrator nor looks for rank 0 at MASTER_ADDR.
  static std::shared_ptr<World> meet(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                     std::chrono::milliseconds timeout, bool own_group);
  // Registers w's peer with config `c` and, unless `own_group`, makes w the World up now (or
  // throws, w shut down).
  static std::shared_ptr<World> enter(std::shared_ptr<World> w, const Config& c, bool own_group = false);
  mutable std::mutex mu_;
  std::unique_ptr<HostedOrchestrator> hosted_;
  std::unique_ptr<Runtime> runtime_;
  Peer peer_;
  std::chrono::milliseconds timeout_{0};
  bool down_ = false;
};

} // namespace chorus::python
