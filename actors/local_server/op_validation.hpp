// Checks that the requests of one collective op agree and fit their buffers, and derives what the
// schedule needs (root rank, element count). The first problem found becomes every peer's error.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include <chorus/status.hpp>
#include "actors/local_server/op_request.hpp"
#include "core/op_desc.hpp"
#include "core/op_kinds.hpp"  // reduces, rooted: what its checks ask of a kind

namespace chorus {

// The op its peers agreed on, and what its by-data forms need beside.
struct OpShape : OpDesc {
  DType out_dtype = DType::f32;  // broadcast/scatter by data: what receivers allocate
  Shape out_shape;
  Shape agreed_shape;   // the shape every peer passed (by-root forms)
};

// "peer 3" or "peers 0, 4": the peers an error or a status report names.
std::string peer_names(const std::vector<int>& peers);

// One request on its own: sizes, dtypes, root range, reduce op validity.
Status check_request(const OpRequestData& r, int n);

// The requests of one op (the n peers of a group, or this node's share of them in multi-node
// mode; n is the whole group's size). On success fills `shape`.
Status check_agreement(const std::vector<const OpRequestData*>& reqs, int n, OpShape& shape);

} // namespace chorus
