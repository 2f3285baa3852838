// A peer's way through the arena (strategies/arena.hpp): the world's small ops on host tensors,
// among the threads of one process or the node processes of a job on one host, without the
// local server. The peer posts its call; if every peer's agrees and fits, the op runs there, else
// (or when a peer is late) it goes on down the ordinary path under the same sequence number.
#pragma once
#include <memory>
#include <optional>

#include "runtime/peer/run_op.hpp"
#include "strategies/arena.hpp"
#include "strategies/arena_ops.hpp"

namespace chorus::peer_impl {

// A heap arena for the `peers` threads of one process (open at once), or null when the arena is
// turned off (CHORUS_ARENA_KIB=0).
std::shared_ptr<ArenaSeat> local_arena(uint32_t peers);

// The call of peer `rank` of `n` as the arena compares it (its `fits`: the call is well formed):
// the local server's checks (check_request and check_agreement in op_validation.cpp) of the
// fixed-size forms, strict where they are loose (a call that does not fit still runs, the
// ordinary way). Each path adds its own conditions (host tensors that fit a slot; tensors on one GPU).
ArenaCall describe_call(const OpRequestData& req, const Tensor& in, const Tensor& out, uint32_t n, uint32_t rank);

// An op enters the arena: it takes its sequence number (req.op.seq) and notes its entry in `rec`
// (the flight recorder's and the trace's begin; its timeout counts from here).
void enter_arena(PeerState& s, OpRecord& rec, OpRequestData& req, const Tensor& data);

// The op in the arena: its status when it ran there; nullopt when it takes the ordinary path,
// with req.op.seq its sequence number (already taken) and `rec` noting its entry.
std::optional<Status> arena_collective(PeerState& s, OpRecord& rec, OpRequestData& req, const Tensor& in,
                                       const Tensor& out);

} // namespace chorus::peer_impl
