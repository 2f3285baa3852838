// What nodes send each other on their data connections (messages/chorus.capnp: DataHello,
// OpAnnounce, P2PHeader, P2PAck) as C++ types, and their codecs. A frame's payload is the flat
// word array of one message (envelope_bytes); tensor bytes travel raw after it. Decoding validates
// enum ranges and error codes and returns an error string for garbled input, never a crash.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <chorus/status.hpp>
#include <chorus/tensor.hpp>
#include <chorus/types.hpp>

namespace chorus {

// The first frame on a new data connection, each way: proves the connection belongs to this
// collective (Topology.collective and token) and names the sender.
struct DataHello {
  uint32_t protocol_version = 0;
  uint64_t collective = 0;
  uint32_t node = 0;
  uint64_t token = 0;
};

// What a node tells the others when all of its peers have called one collective op.
struct OpAnnouncement {
  uint32_t node = 0;
  OpKind kind = OpKind::barrier;
  DType dtype = DType::f32;
  ReduceOp redop = ReduceOp::sum;
  uint32_t root = 0;       // global rank
  uint64_t count = 0;      // per-peer elements (strategies/schedule.hpp)
  Shape shape;             // the agreed tensor shape
  Status status;           // not ok: this node's own peers disagree
  // An op on GPU tensors through NCCL across nodes (cuda/nccl_job.hpp).
  bool gpu = false;
  std::vector<int32_t> devices;  // this node's ranks' GPUs, in rank order
  uint64_t nccl_live = 0;        // NcclAnnounce
  uint64_t nccl_last = 0;
  std::string nccl_id;           // rank 0's node: the id of generation nccl_last + 1 (128 bytes)
  // The shortest timeout this node's peers gave the op of its own (OpOptions::timeout), in ms; 0:
  // none. The shortest of every node's bounds the op's transfers on every node (NetOp).
  uint32_t timeout_ms = 0;
};

// The header of a point-to-point send across nodes; the tensor's bytes follow it in the frame.
struct P2PHeaderData {
  uint32_t source = 0;       // global peer ids
  uint32_t destination = 0;
  uint64_t tag = 0;
  DType dtype = DType::f32;
  uint64_t numel = 0;
  Status failed;             // not ok: the sender could not send (then no data follows)
  uint64_t id = 0;           // the sender node's number for the message
  bool pulled = false;       // no data follows: the receive pulls it (frame p2p_pull)
  // Whether its data comes right after it (a p2p_body frame): an eager message with elements.
  bool data_follows() const { return failed.is_ok() && !pulled && numel > 0; }
};

// The receiver's answer to a send: ok, or why the pair did not match.
struct P2PAckData {
  uint32_t source = 0;
  uint32_t destination = 0;
  uint64_t tag = 0;
  Status status;
  uint64_t id = 0;  // the message answered (or withdrawn)
};

std::string encode_data_hello(const DataHello& h);
std::string encode_announcement(const OpAnnouncement& a);
std::string encode_p2p_header(const P2PHeaderData& h);
std::string encode_p2p_ack(const P2PAckData& a);
std::string encode_stragglers(const std::vector<uint32_t>& ranks);
std::string encode_leaving(const Status& why);

std::optional<DataHello> decode_data_hello(const void* data, std::size_t bytes, std::string& error);
std::optional<OpAnnouncement> decode_announcement(const void* data, std::size_t bytes, std::string& error);
std::optional<P2PHeaderData> decode_p2p_header(const void* data, std::size_t bytes, std::string& error);
std::optional<P2PAckData> decode_p2p_ack(const void* data, std::size_t bytes, std::string& error);
std::optional<std::vector<uint32_t>> decode_stragglers(const void* data, std::size_t bytes, std::string& error);
std::optional<Status> decode_leaving(const void* data, std::size_t bytes, std::string& error);

} // namespace chorus
