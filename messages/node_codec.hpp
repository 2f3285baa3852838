// The messages between a node's global client and the orchestrator (messages/chorus.capnp:
// NodeRegister, NodeRegisterReply, NodeLeave, NodeLost) as C++ types, and their codecs. Decoding
// validates and returns an error string for garbled input.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <chorus/config.hpp>
#include <chorus/status.hpp>
#include "messages/envelope.hpp"

namespace chorus {

// A member's registration for its collective's next membership epoch (chorus.capnp: Rejoin).
struct RejoinData {
  enum class Kind : uint8_t { none = 0, shrink = 1, grow = 2 };
  Kind kind = Kind::none;
  uint64_t collective = 0;
  uint32_t node_id = 0;
  uint64_t ticket = 0;
  std::vector<uint32_t> exclude;  // shrink: node ids left out although alive (ascending)
  std::vector<uint32_t> unkept;   // node ids whose link ended on this side (ascending)
  bool operator==(const RejoinData&) const = default;
};
std::string_view to_string(RejoinData::Kind k);

struct NodeRegisterData {
  uint32_t protocol_version = 0;
  std::string secret;  // the node's, to pass the front door: never encoded (never on the wire)
  Config config;
  uint32_t num_peers = 0;
  std::string data_address;
  uint32_t hardware_threads = 0;
  std::string host_key{};  // which host the node is on (transport/host_identity.hpp)
  uint32_t gpus = 0;     // CUDA devices of the node's machine (0: none, or chorus without CUDA)
  int32_t rank = -1;     // the node id its launcher gave it (-1: any)
  RejoinData rejoin{};   // kind none: a first registration
  bool newcomer = false; // a newcomer to a running elastic job (Config::newcomer)
};

struct NodeEntry {
  uint32_t num_peers = 0;
  uint32_t peer_offset = 0;
  std::string data_address;
  uint32_t hardware_threads = 0;  // of the node's machine
  uint32_t host = 0;              // nodes on one host share it (0, 1, ... by first node)
  uint32_t gpus = 0;              // as the node registered it
  bool operator==(const NodeEntry&) const = default;
};

struct TopologyData {
  uint64_t collective = 0;
  uint32_t node_id = 0;
  uint32_t num_nodes = 0;
  uint32_t total_peers = 0;
  std::vector<NodeEntry> nodes;
  uint64_t token = 0;  // data-plane connections present it (see DataHello)
  uint32_t epoch = 0;  // membership epoch: 0 at admission, one more per shrink or grow
  uint64_t ticket = 0; // the receiver's own, for its Rejoin
  std::vector<int32_t> previous{};  // by node id: its id in the epoch before (-1: newcomer); empty at 0
  std::vector<uint32_t> relink{}; // the receiver's: node ids whose kept link it remakes (ascending)
  bool operator==(const TopologyData&) const = default;
};

struct NodeLeaveData {
  uint64_t collective = 0;
  uint32_t node_id = 0;
};

struct NodeLostData {
  uint64_t collective = 0;
  uint32_t node_id = 0;
  std::string reason;
};

Envelope encode_node_register(const NodeRegisterData& r);
// ok status: topology is sent; otherwise the error alone.
Envelope encode_node_register_reply(const Status& s, const TopologyData& t = {});
Envelope encode_node_leave(const NodeLeaveData& l);
Envelope encode_node_lost(const NodeLostData& l);

std::optional<NodeRegisterData> decode_node_register(const Envelope& e, std::string& error);
// A decoded reply: the status and, when ok, the topology.
struct NodeRegisterReplyData {
  Status status;
  TopologyData topology;
};
std::optional<NodeRegisterReplyData> decode_node_register_reply(const Envelope& e, std::string& error);
std::optional<NodeLeaveData> decode_node_leave(const Envelope& e, std::string& error);
std::optional<NodeLostData> decode_node_lost(const Envelope& e, std::string& error);

// The reply to a register request that repeats one still waiting for its answer: the node keeps
// waiting for the answer to the first.
inline constexpr const char* kSuperseded = "repeat of a pending register request";

} // namespace chorus
