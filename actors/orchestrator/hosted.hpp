// An orchestrator served from inside a process that is not the daemon: rank 0's, when a launcher
// named no orchestrator (Config::host_orchestrator), or chorus-run's. It runs in an actor system
// of its own (configured as the daemon's: the accepting end of BASP, its own heartbeats), so it
// neither shares a scheduler with the process's peers nor connects to its own system, and it is
// published behind its front door like the daemon's. One job: it admits `nodes` nodes at a time.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <chorus/result.hpp>
#include "actors/remoting.hpp"

namespace chorus {

class HostedOrchestrator {
 public:
  struct Options {
    std::string host = "127.0.0.1";               // the address its door listens on
    uint16_t port = 0;                            // 0: a free one (port() says which)
    uint32_t nodes = 1;                           // nodes per collective
    std::string secret;                           // the door's challenge ("": none)
    std::chrono::milliseconds admission{30000};   // a collective's admission, from its first node
    TlsFiles tls;                                 // all three files, or none
  };
  // Starts and publishes it; the error names the address when the port cannot be had.
  static Result<std::unique_ptr<HostedOrchestrator>> start(const Options& opts);
  // Closes the door (its nodes hear that the orchestrator is lost), stops the actor and its system.
  ~HostedOrchestrator();
  HostedOrchestrator(const HostedOrchestrator&) = delete;
  HostedOrchestrator& operator=(const HostedOrchestrator&) = delete;

  uint16_t port() const;
  // Waits until no node is in its collective any more (each has left or been lost), up to
  // `limit`; true when so. A process that hosts the orchestrator for its own job calls it before
  // it closes the door, so that the others' last ops end before they hear it is gone.
  bool wait_until_left(std::chrono::milliseconds limit) const;

 private:
  struct State;
  explicit HostedOrchestrator(std::unique_ptr<State> s);
  std::unique_ptr<State> state_;
};

} // namespace chorus
