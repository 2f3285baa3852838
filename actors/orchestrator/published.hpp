// The orchestrator as nodes reach it: the front door (transport/front_door.hpp) on the public
// address, through which alone a connection reaches CAF: BASP parses nothing a stranger sends.
// Behind it, each admitted connection is handed to CAF in-process as one end of a socket pair, so
// CAF has no port at all that another local user could reach, the link is TLS ended by the door
// (with the system's certificates when it has TLS files, else keyed by the secret: the door's
// certified and sealed modes), and every frame the client sends passes a BaspGuard
// (basp_guard.hpp) first, decrypted.
// Nodes and chorus-ctl pass the door with connect_orchestrator()
// (actors/global_client/node_session.hpp).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <chorus/result.hpp>
#include "actors/orchestrator/orchestrator.hpp"

namespace chorus {

class FrontDoor;

// The bound on a client's BASP payloads (BaspGuard). Control messages are small (a registration,
// a status report): 1 MiB leaves room for the largest job's topology and refuses the 256 MiB
// claims that would otherwise be reserved.
inline constexpr uint32_t kDefaultMaxControlPayload = 1u << 20;

class PublishedOrchestrator {
 public:
  struct Options {
    std::string host = "127.0.0.1";  // the public address
    uint16_t port = 0;               // 0: a free port
    std::string secret;              // the door's challenge (empty: none)
    std::chrono::milliseconds handshake_timeout{2000};
    uint32_t max_payload = kDefaultMaxControlPayload;  // the bound on a client's BASP payloads
  };
  // Publishes `orch` behind its door (TLS with the certificates of `sys` when it has TLS files).
  static Result<std::unique_ptr<PublishedOrchestrator>> publish(caf::actor_system& sys, const orchestrator_actor& orch,
                                                                const Options& opts);
  // Closes the door (and every connection through it: the nodes hear the orchestrator is lost),
  // then unpublishes the actor.
  ~PublishedOrchestrator();
  PublishedOrchestrator(const PublishedOrchestrator&) = delete;
  PublishedOrchestrator& operator=(const PublishedOrchestrator&) = delete;

  uint16_t port() const { return port_; }  // the door's

 private:
  PublishedOrchestrator(caf::actor_system& sys, orchestrator_actor orch);
  // A socket pair: one end to CAF's BASP broker as a connection to the published actor, the
  // other returned (-1 and errno when the pair cannot be made). Runs on the door's thread.
  int hand_over();
  caf::actor_system& sys_;
  orchestrator_actor orch_;
  caf::actor basp_;   // CAF's BASP broker, to which connections are handed over
  uint16_t key_ = 0;  // what BASP files the actor under for them
  uint16_t port_ = 0;
  std::unique_ptr<FrontDoor> door_;
};

} // namespace chorus
