#include "actors/global_client/announcements.hpp"

#include "actors/local_server/op_validation.hpp"

namespace chorus {

std::string describe(const OpAnnouncement& a) {
  std::string s(to_string(a.kind));
  if (a.kind == OpKind::barrier) return s;
  if (reduces(a.kind)) (s += ' ') += to_string(a.redop);
  std::string dims;
  for (std::size_t i = 0; i < a.shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(a.shape[i]);
  s += " of " + std::string(to_string(a.dtype)) + "[" + dims + "]";
  if (rooted(a.kind)) s += " root " + std::to_string(a.root);
  return s;
}

Status node_failure(const OpAnnouncement& a, uint64_t seq) {
  return {a.status.code(), op_label(a.kind, seq) + ": node " + std::to_string(a.node) + ": " + a.status.message()};
}

Status compare_announcements(const OpAnnouncement& f, const OpAnnouncement& o, uint64_t seq) {
  Errc code = Errc::ok;
  if (f.kind != o.kind) code = Errc::op_mismatch;
  else if (rooted(f.kind) && f.root != o.root) code = Errc::root_mismatch;
  else if (reduces(f.kind) && f.redop != o.redop) code = Errc::reduce_op_mismatch;
  else if (f.kind != OpKind::barrier && f.dtype != o.dtype) code = Errc::dtype_mismatch;
  else if (f.kind != OpKind::barrier && (f.count != o.count || f.shape != o.shape)) code = Errc::shape_mismatch;
  if (code == Errc::ok && f.gpu != o.gpu) {
    // The NCCL path runs no host schedule: a node that does cannot meet one that does not.
    const auto& g = f.gpu ? f : o;
    const auto& h = f.gpu ? o : f;
    return {Errc::device_mismatch,
            op_label(f.kind, seq) + ": node " + std::to_string(g.node) + "'s peers pass GPU tensors, which go through " +
                "NCCL, but node " + std::to_string(h.node) + "'s pass host tensors (nccl, and auto where every node " +
                "of the op has a GPU, run GPU tensors through NCCL, which every peer then joins with GPU tensors; a " +
                "host strategy, e.g. ring, stages an op that mixes them through host memory)"};
  }
  if (code == Errc::ok) return Status::ok();
  return {code, op_label(f.kind, seq) + ": node " + std::to_string(f.node) + " calls " + describe(f) +
                    " but node " + std::to_string(o.node) + " calls " + describe(o)};
}

Status judge_announcements(const std::vector<std::optional<OpAnnouncement>>& by_node,
                           const std::vector<bool>& takes_part, uint64_t seq) {
  const OpAnnouncement* first = nullptr;
  for (std::size_t k = 0; k < by_node.size(); ++k) {
    if (!takes_part[k]) continue;
    if (!by_node[k]->status.is_ok()) return node_failure(*by_node[k], seq);
    if (!first) first = &*by_node[k];
  }
  for (std::size_t k = 0; k < by_node.size(); ++k)
    if (takes_part[k] && &*by_node[k] != first)
      if (auto s = compare_announcements(*first, *by_node[k], seq); !s.is_ok()) return s;
  return Status::ok();
}

} // namespace chorus
