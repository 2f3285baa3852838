// What a client that passed the front door may send the orchestrator's CAF, checked frame by frame
// on the door's relay before CAF parses any of it. CAF 0.17's BASP acts on whatever a connection
// sends (an empty client handshake crashes it; a routed message carries whatever source node it
// claims), so a connection speaks for its own node only:
//  - its first frame is a client handshake whose payload is its node id, pinned to the connection
//    (CAF repeats the handshake once: the same id);
//  - then direct messages (the sender's node is the connection's: BASP implies it) to the
//    orchestrator's actor or to an actor of the orchestrator's side that sent this connection a
//    message (a reply: CAF's own helpers ask each new node for its info), with no forwarding stack, and the one message CAF sends a new node by
//    name (SpawnServ's "info" request, byte for byte: the other named actors, like ConfigServ's
//    key-value store, are not the client's to use); monitor and down messages from the pinned
//    node to the orchestrator's; heartbeats;
//  - never a routed message (a node forwards nothing, and its source node is only a claim) or a
//    server handshake;
//  - a payload where CAF reads one, never empty, at most max_payload bytes;
//  - at most kMaxUnanswered requests whose answers it has not read: replies wait in the
//    orchestrator's memory until the relay can pass them on, so a client that asks and never reads
//    is dropped at that bound rather than let the daemon grow (1 M unread `get`s added 63 MB).
// Anything else closes the connection (the door logs the reason with the client's address).
#pragma once
#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_set>

#include "actors/orchestrator/last_heard.hpp"
#include "transport/relay.hpp"

namespace chorus {

// What a guard knows of the orchestrator's side, as BASP's bytes (basp_server.hpp reads them from
// its actor system).
struct BaspServer {
  std::string node;          // its node id as CAF serializes it
  uint64_t actor = 0;        // the id of the actor the clients talk to
  std::string info_request;  // the payload of CAF's request for SpawnServ's info
};

class BaspGuard : public StreamGuard {
 public:
  // A node has a registration and a status answer or two outstanding, chorus-ctl one request.
  static constexpr uint64_t kMaxUnanswered = 256;

  BaspGuard(BaspServer server, uint32_t max_payload);
  std::string check(const char* data, std::size_t size) override;
  // The orchestrator's frames to the client: their senders may be answered.
  void observe(const char* data, std::size_t size) override;
  // Its node's record in last_heard() (last_heard.hpp): when bytes last came, how it ended.
  void ended(bool by_guarded) override;

  static constexpr std::size_t kHeaderSize = 32;

 private:
  std::string on_header();
  std::string on_prefix();
  std::string on_frame_end();

  BaspServer server_;
  uint32_t max_payload_;
  bool named_ = false;  // the frame is a message to a named actor
  std::string pinned_;  // the client's node id, from its first handshake
  std::shared_ptr<LastHeard::Entry> heard_;  // pinned_'s record, from the handshake on
  std::array<uint8_t, kHeaderSize> header_{};
  std::size_t header_got_ = 0;
  uint8_t op_ = 0;
  uint32_t payload_left_ = 0;
  std::size_t prefix_need_ = 0;  // payload bytes to look at
  std::string prefix_;
  std::string failed_;  // once refused, always refused
  // The other direction, read frame by frame for its senders.
  std::array<uint8_t, kHeaderSize> seen_header_{};
  std::size_t seen_got_ = 0;
  uint64_t seen_skip_ = 0;  // payload bytes to pass over
  uint64_t unanswered_ = 0;  // requests sent minus responses passed on to the client
  std::unordered_set<uint64_t> answerable_;
  std::deque<uint64_t> answerable_order_;  // oldest first: the set is bounded
};

} // namespace chorus
