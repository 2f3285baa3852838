// Where a job stands (messages/chorus.capnp: StatusRequest, PeerStatus, NodeStatus, JobStatus) as
// C++ types, their codecs, and the report people read: ranks grouped by the op they are in and
// what it waits for. chorus-ctl asks the orchestrator, which asks every node's actor.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <chorus/status.hpp>
#include "messages/envelope.hpp"

namespace chorus {

// Says nothing: who may ask, the front door decided (the secret never crosses the wire).
struct StatusRequestData {};

struct PeerStatusData {
  uint32_t rank = 0;
  bool busy = false;
  uint32_t group = 0;
  uint64_t seq = UINT64_MAX;
  std::string op, state;
  int64_t waited_ns = 0;
  std::string waiting_for;
  std::string last_done;
  bool operator==(const PeerStatusData&) const = default;
};

struct NodeStatusData {
  uint32_t node = 0;
  std::string host;
  int64_t pid = 0;
  std::vector<PeerStatusData> peers;
  std::string note;
  bool operator==(const NodeStatusData&) const = default;
};

// A member of a complete collective as the orchestrator knows it.
struct JobMemberData {
  enum class State : uint8_t { joined, left, lost };
  uint32_t node = 0;
  State state = State::joined;
  std::string reason;  // lost: why
  bool operator==(const JobMemberData&) const = default;
};

struct JobStatusData {
  Status status;  // not ok: the request was refused (the rest is empty)
  uint64_t collective = 0;
  uint32_t expected_nodes = 0, registered_nodes = 0;
  bool complete = false;
  std::vector<NodeStatusData> nodes;
  std::vector<uint32_t> silent;  // nodes that did not answer in time
  std::vector<JobMemberData> members;  // by node id, once complete
  uint32_t epoch = 0;      // membership epoch (docs/elastic.md)
  uint32_t newcomers = 0;  // waiting for a grow
};

Envelope encode_status_request(const StatusRequestData& r);
Envelope encode_node_status(const NodeStatusData& n);
Envelope encode_job_status(const JobStatusData& j);
std::optional<StatusRequestData> decode_status_request(const Envelope& e, std::string& error);
std::optional<NodeStatusData> decode_node_status(const Envelope& e, std::string& error);
std::optional<JobStatusData> decode_job_status(const Envelope& e, std::string& error);

// The report: a header line, then one line per group of ranks in the same op, state and wait
// ("ranks 0-1,4-5: group 0 #3 all_reduce f32[4] sum, running for 1.2 s; waits for node 1 (not
// called yet)"), the idle ranks with their last op, the nodes lost or gone (with the
// orchestrator's reason) and the nodes that did not answer.
std::string job_status_report(const JobStatusData& j);

// Ranks as people read them: "0-3,5,7-8" (sorted, repeats dropped).
std::string rank_list(std::vector<uint32_t> ranks);
// "rank 3" or "ranks 0-2,5".
std::string rank_phrase(const std::vector<uint32_t>& ranks);

} // namespace chorus
