// The collective a Python process is in: one chorus node of one peer, its Runtime and, on rank 0,
// the orchestrator it hosts. torch.distributed's default group makes it through the store torch
// passes every backend: rank 0 starts the orchestrator on a free port and publishes its address
// and a drawn secret there; every rank reads them and joins. Subgroups are groups of its peer.
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
  // The World up now, or an invalid_config Error saying why there is none.
  static std::shared_ptr<World> current();
  // Ends every World (the interpreter's exit; ops after it raise chorus.Finished).
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
  // Registers w's peer with config `c` and makes w the World up now (or throws, w shut down).
  static std::shared_ptr<World> enter(std::shared_ptr<World> w, const Config& c);
  mutable std::mutex mu_;
  std::unique_ptr<HostedOrchestrator> hosted_;
  std::unique_ptr<Runtime> runtime_;
  Peer peer_;
  std::chrono::milliseconds timeout_{0};
  bool down_ = false;
};

} // namespace chorus::python
