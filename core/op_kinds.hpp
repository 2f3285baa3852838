// What kind of op an OpKind is, and its name, for every layer that words or checks one.
#pragma once
#include <cstdint>
#include <string>

#include <chorus/types.hpp>

namespace chorus {

// The op combines data with a reduce op.
constexpr bool reduces(OpKind k) { return k == OpKind::all_reduce || k == OpKind::reduce || k == OpKind::reduce_scatter; }
// The op has a root.
constexpr bool rooted(OpKind k) {
  return k == OpKind::reduce || k == OpKind::broadcast || k == OpKind::gather || k == OpKind::scatter;
}

// A receive's other side where it takes the first send from any peer (Peer::recv_any).
inline constexpr uint32_t kAnySource = UINT32_MAX;

// "all_reduce #7": an op as errors, logs and traces name it.
inline std::string op_label(OpKind kind, uint64_t seq) { return std::string(to_string(kind)) + " #" + std::to_string(seq); }

} // namespace chorus
