// How a Peer handle runs one op, shared by the files of runtime/peer/: hand the request to the
// local server's core, wait for the plan, run this peer's part of it. The public entry points
// (peer.cpp, by_data.cpp, groups.cpp, finish.cpp) are built from these.
#pragma once
#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include <chorus/peer.hpp>
#include "actors/local_server/call.hpp"
#include "runtime/peer/peer_state.hpp"
#include "strategies/planner.hpp"
#include "observability/trace/peer_trace.hpp"

namespace chorus::peer_impl {

Status no_peer();
// The timeout of the op running on this thread: its OpOptions::timeout where it gave one, else the
// handle's Config::timeout (op_lanes.cpp keeps it). What an op waits for on the peer's side
// counts from it.
std::chrono::milliseconds op_timeout(const PeerState& s);
// Whether that timeout is the op's own (OpOptions::timeout), not the Config's.
bool op_timeout_given();
// Puts `t` (an OpOptions::timeout; zero: none) in force on this thread for a scope: what an op
// does at its call, before its body runs (a receive posting itself), then counts from it too.
class OpTimeoutScope {
 public:
  explicit OpTimeoutScope(std::chrono::milliseconds t);
  ~OpTimeoutScope();
  OpTimeoutScope(const OpTimeoutScope&) = delete;
  OpTimeoutScope& operator=(const OpTimeoutScope&) = delete;

 private:
  std::chrono::milliseconds before_;
};
// Why the op running on this thread cannot start (its stream's earlier work did not finish in
// time, op_lanes.cpp), else ok: the op then takes its place failing (Call::local_error).
Status start_failure();
// What every op of peer `who` gets once it has finished.
Status already_finished(PeerId who);

inline std::byte* bytes(const Tensor& t) { return static_cast<std::byte*>(t.data()); }

OpRequestData make_op(OpKind k, ReduceOp op = ReduceOp::sum, PeerId root = 0);
// A send's or a receive's request: the peer at the other end and the tag.
OpRequestData make_p2p(OpKind k, PeerId other, uint64_t tag);

struct PostedOp;

// One call's notes while it runs: the flight recorder's ticket and the trace's span. A peer's
// calls may overlap (send and recv from several threads, a group handle's op beside the
// world's), so each call keeps its own, on its stack.
struct OpRecord {
  uint64_t flight_ticket = 0;   // the recorder's name for the op (0: not recorded)
  std::optional<OpSpan> span;   // the trace's, when it is on (nothing to fill per op when off)
  bool entered = false;         // the arena took the op's sequence number and noted its entry
  Clock::time_point since{};    // ...when: the op's timeout counts from there
};

// Whether this handle may call an op: not once it finished, or (a group) was destroyed.
Status callable(const PeerState& s);
// Whether rank `other` of the handle lives on another node (multi-node mode): send/recv with it
// go over the global client's data connections instead of the local server.
bool on_other_node(const PeerState& s, PeerId other);
// The call that carries this peer's op request to the local server (`local_error`: see Call; ok
// means the start_failure() of the op running on this thread).
Call op_call(const PeerState& s, OpRequestData req, const Tensor& in, const Tensor& out, Status local_error = Status::ok());
// Sends one op request and waits for the server's answer: an error, or a plan to run. The flight
// recorder and the trace note the op's entry and its match (or its failure, which ends it).
std::shared_ptr<Reply> request(PeerState& s, OpRecord& rec, OpRequestData req, const Tensor& in,
                               const Tensor& out, Status& status, Status local_error = Status::ok());
// request() in its two steps: the request enters the server (null and `status` set where the
// handle may not call), then the wait for its answer, whose timeout counts from `start`.
std::shared_ptr<Reply> enter_request(PeerState& s, OpRecord& rec, OpRequestData req, const Tensor& in,
                                     const Tensor& out, Status& status, Status local_error = Status::ok());
Status await_request(PeerState& s, OpRecord& rec, const std::shared_ptr<Reply>& reply, Clock::time_point start);
// Sends one group request (create or destroy) as this peer and waits for the server's answer.
std::shared_ptr<Reply> group_request(PeerState& s, GroupRequestData g, Status& status);
// What the flight recorder and the trace note of this peer's op: its entry (`data`: the tensor
// that names its dtype and shape), its match (the plan came; `strategy` runs it, and becomes the
// handle's last strategy) and its end (returns `st`), kept in the call's own OpRecord. request()
// and execute() call them; so do the paths that bypass the local server (send/recv across
// nodes). Each is a branch or two when neither is on.
void record_begin(PeerState& s, OpRecord& rec, const OpRequestData& req, const Tensor& data);
void record_matched(PeerState& s, OpRecord& rec, const RunStrategy& strategy);
Status record_end(PeerState& s, OpRecord& rec, Status st);
// Runs this peer's part of a planned op (the trace hears of its steps), then divides for avg
// where this peer holds a result; the flight recorder and the trace note how the op ended.
Status execute(PeerState& s, OpRecord& rec, Reply& r, const std::byte* in, std::byte* out);
// Takes this peer's place in its next op without data, so that every peer of the op gets `why`
// (and sequence numbers stay aligned) rather than waiting for this one until the timeout.
Status fail_op(PeerState& s, OpRequestData req, Status why);
Status fail_op(PeerState& s, OpRecord& rec, OpRequestData req, Status why);  // after the arena
// The planner's question for an op of `kind` on host tensors of this handle: its group, where its
// peers are, and the arena open to it (strategies/planner.hpp).
PlanQuery host_query(const PeerState& s, OpKind kind);
// One fixed-size op on host or GPU tensors: the world's first through the arena where its peers
// share memory (host tensors: arena_path.hpp; GPU tensors of processes sharing a GPU:
// gpu_arena_path.hpp), else the ordinary way.
Status collective(PeerState* s, OpRequestData req, const Tensor& in, const Tensor& out);
// The ordinary way: the local server's plan (after the arena where `rec` says the op entered it).
Status ordinary(PeerState& s, OpRecord& rec, OpRequestData req, const Tensor& in, const Tensor& out);

// host_staging.cpp: GPU tensors where the op needs host memory (the ordinary way, on host copies).
Status staged_collective(PeerState* s, OpRecord& rec, OpRequestData req, const Tensor& in, const Tensor& out);
Result<Tensor> staged_by_data(PeerState& s, OpKind kind, const Tensor& data);
Status send_to_node(PeerState& s, const Tensor& t, PeerId dst, uint64_t tag);
// `posted`: the receive as it was posted at its call (posted_op.hpp); null: it enters now.
Status recv_from_node(PeerState& s, Tensor& t, PeerId src, uint64_t tag, PostedOp* posted);
// recv_any.cpp: a receive from any rank of the group; the sender's rank.
Result<PeerId> recv_any_now(PeerState& s, Tensor& t, uint64_t tag, PostedOp* posted);
// Who may send to a receive from any source of the handle: its group's peers on other nodes
// (global ids) and their nodes, and whether any is on this node.
struct AnySenders {
  std::vector<uint32_t> remote, nodes;
  bool here = false;
};
AnySenders any_senders(const PeerState& s);

// by_data.cpp: broadcast or scatter whose root is the one peer that passes data.
Result<Tensor> by_data(PeerState* s, OpKind kind, std::optional<Tensor> data);

} // namespace chorus::peer_impl
