// The local server core: matching the calls of one op, collectives by (group, sequence number) and
// send/recv halves by (group, source, destination, tag).
#include "actors/local_server/server_core.hpp"

#include <algorithm>

#include "actors/global_client/global_client.hpp"
#include "core/op_kinds.hpp"

namespace chorus {

void LocalServerCore::on_op(Call call) {
  Effects fx;
  {
    std::lock_guard<std::mutex> lk(mu_);
    match(std::move(call), fx);
  }
  // The launch of an op this call completed runs without the lock (see mu_ in server_core.hpp).
  if (fx.op) launch(*fx.op);
  if (fx.pair) launch_pair(*fx.pair);
  if (fx.never && fx.never_global) fx.never_global->finished(fx.never->first, fx.never->second);
  if (enter_hook_) enter_hook_();
}

void LocalServerCore::match(Call call, Effects& fx) {
  if (closed_) return call.reply->complete(*closed_);
  std::optional<OpRequestData> req = std::move(call.request);
  if (auto s = check_caller(req->peer, req->epoch); !s) return call.reply->complete(s);
  if (global_) return global_op(std::move(*req), std::move(call), fx);
  Status not_member;
  const Group* g = group_of(req->op.group, req->peer, not_member);
  if (!g) return call.reply->complete(not_member);
  req->rank = static_cast<uint32_t>(std::find(g->members.begin(), g->members.end(), req->peer) - g->members.begin());
  if (req->op.kind == OpKind::send || req->op.kind == OpKind::recv) {
    // The other side is named by its rank in the group; queues are keyed by global ids.
    const bool is_send = req->op.kind == OpKind::send;
    if (!is_send && req->any_source) return point_to_point(std::move(*req), std::move(call), fx);
    if (req->other >= g->members.size())
      return call.reply->complete({Errc::invalid_argument, "peer " + std::to_string(req->peer) + ": " +
                                      (is_send ? "send to" : "recv from") + " peer " + std::to_string(req->other) +
                                      " (not a peer)"});
    req->other = g->members[req->other];
    return point_to_point(std::move(*req), std::move(call), fx);
  }
  const uint32_t index = req->rank;
  collective(std::move(*req), std::move(call), static_cast<int>(g->members.size()), index, fx);
}

void LocalServerCore::global_op(OpRequestData req, Call call, Effects& fx) {
  const uint32_t offset = global_->offset(), total = global_->total_peers(), here = config_->num_devices;
  const uint32_t me = offset + req.peer;  // global id
  const std::vector<uint32_t>* members = nullptr;  // by rank; null for the world (rank = global id)
  if (req.op.group != 0) {
    Status not_member;
    const Group* g = group_of(req.op.group, me, not_member);
    if (!g) return call.reply->complete(not_member);
    members = &g->members;
  }
  auto global_of = [&](uint32_t rank) { return members ? (*members)[rank] : rank; };
  const uint32_t size = members ? static_cast<uint32_t>(members->size()) : total;
  req.rank = members ? static_cast<uint32_t>(std::find(members->begin(), members->end(), me) - members->begin()) : me;
  if (req.op.kind == OpKind::send || req.op.kind == OpKind::recv) {
    // Pairs across nodes go through GlobalClient::send/recv; here both ends are on this node.
    const bool is_send = req.op.kind == OpKind::send;
    if (!is_send && req.any_source) return point_to_point(std::move(req), std::move(call), fx);
    const uint32_t other = req.other < size ? global_of(req.other) : UINT32_MAX;
    if (other < offset || other >= offset + here)
      return call.reply->complete({Errc::invalid_argument, "peer " + std::to_string(req.rank) + ": " +
                                      (is_send ? "send to" : "recv from") + " peer " + std::to_string(req.other) +
                                      (req.other >= size ? " (not a peer)" : " (not on this node)")});
    req.other = other - offset;
    return point_to_point(std::move(req), std::move(call), fx);
  }
  if (req.root_from_data)
    return call.reply->complete({Errc::internal, "by-data broadcast/scatter reached the server in multi-node mode"});
  // The arrivals to wait for: the group's members on this node, in rank order.
  uint32_t local = here, index = req.peer;
  if (members) {
    local = index = 0;
    for (uint32_t m : *members)
      if (m >= offset && m < offset + here) {
        if (m < me) ++index;
        ++local;
      }
  }
  collective(std::move(req), std::move(call), static_cast<int>(local), index, fx);
}

void LocalServerCore::collective(OpRequestData req, Call call, int n, uint32_t index, Effects& fx) {
  const OpKey key{req.op.group, req.op.seq};
  // After a node loss no collective can run (launch_global would fail it): a new one fails at its
  // first peer instead of waiting for this node's others, who may have stopped calling on the loss.
  if (node_lost_ && !ops_.count(key)) return call.reply->complete(lost_op(req.op.kind, req.op.seq, *node_lost_));
  auto [it, fresh] = ops_.try_emplace(key);
  PendingOp& op = it->second;
  if (fresh) {
    op.arrivals.resize(n);
    op.kind = req.op.kind;
    op.timer = next_timer_++;
    op_timers_[op.timer] = key;
    // Another node never launched it (noted before any peer here called): it fails here at once.
    auto noted = std::find_if(noted_never_.begin(), noted_never_.end(), [&](const auto& e) { return e.first == key; });
    if (noted != noted_never_.end()) {
      fail_op(op, noted->second);
      if (global_) global_->note_failure(req.op.group, req.op.seq, op.failure);
      noted_never_.erase(noted);
      fx.never = key;
      fx.never_global = global_;
    }
  }
  call.reply->timer = op.timer;
  if (op.failed) {  // a late peer of an op that already failed gets the same error
    call.reply->complete(op.failure);
    if (++op.answered == n) { op_timers_.erase(op.timer); ops_.erase(it); }
    return;
  }
  const uint32_t rank = index;
  if (op.arrivals[rank])
    return call.reply->complete({Errc::internal, op_label(req.op.kind, req.op.seq) + ": peer " +
                                    std::to_string(req.peer) + " called twice with one sequence number"});
  op.arrivals[rank] = Arrival{std::move(req), std::move(call)};
  if (++op.arrived == n) {
    Launch l;  // not fx.op.emplace(): clang, in some unity chunks, finds Launch not default-constructible there
    if (prepare_launch(it->first, op, l)) fx.op = std::move(l);
    op_timers_.erase(op.timer);
    ops_.erase(it);
  }
}

void LocalServerCore::point_to_point(OpRequestData req, Call call, Effects& fx) {
  const uint32_t n = config_->num_devices;
  const bool is_send = req.op.kind == OpKind::send;
  const bool any = !is_send && req.any_source;
  if (any) req.other = kAnySource;  // its queue's source
  const std::string what = is_send ? "send" : "recv";
  if (!any && (req.other >= n || req.other == req.peer))
    return call.reply->complete({Errc::invalid_argument, "peer " + std::to_string(req.peer) + ": " + what +
                                    (is_send ? " to" : " from") + " peer " + std::to_string(req.other) +
                                    (req.other == req.peer ? " (itself)" : " (not a peer)")});
  const TensorMeta& mine = is_send ? req.input : req.output;
  if (!mine.present)
    return call.reply->complete({Errc::invalid_argument, "peer " + std::to_string(req.peer) + ": " + what + " without a buffer"});
  P2PKey key = is_send ? P2PKey{req.op.group, req.peer, req.other, req.tag} : P2PKey{req.op.group, req.other, req.peer, req.tag};
  auto& mine_q = is_send ? sends_ : recvs_;
  auto& other_q = is_send ? recvs_ : sends_;
  // The half to pair with: the one queued first (timers grow) of those this call may take. A
  // send may go to a receive from it or to one from any source; a receive from any source takes
  // the first send to it with its tag, from whichever peer.
  auto oit = other_q.end();
  auto consider = [&](std::map<P2PKey, std::deque<P2PHalf>>::iterator it) {
    if (it != other_q.end() && !it->second.empty() &&
        (oit == other_q.end() || it->second.front().timer < oit->second.front().timer))
      oit = it;
  };
  if (is_send) {
    consider(other_q.find(key));
    consider(other_q.find(P2PKey{req.op.group, kAnySource, req.other, req.tag}));
  } else if (any) {
    for (auto it = other_q.lower_bound(P2PKey{req.op.group, 0, 0, 0});
         it != other_q.end() && std::get<0>(it->first) == req.op.group; ++it)
      if (std::get<2>(it->first) == req.peer && std::get<3>(it->first) == req.tag) consider(it);
  } else {
    consider(other_q.find(key));
  }
  if (oit == other_q.end()) {  // wait for the other half
    uint64_t t = next_timer_++;
    p2p_timers_[t] = key;
    call.reply->timer = t;
    mine_q[key].push_back({Arrival{std::move(req), std::move(call)}, t});
    return;
  }
  P2PHalf other = std::move(oit->second.front());
  if (any) std::get<1>(key) = std::get<1>(oit->first);  // the pair's sender
  oit->second.pop_front();
  if (oit->second.empty()) other_q.erase(oit);
  p2p_timers_.erase(other.timer);
  Arrival mine_a{std::move(req), std::move(call)};
  fx.pair.emplace(PairLaunch{key, std::move(is_send ? mine_a : other.arrival), std::move(is_send ? other.arrival : mine_a),
                             config_});
}

} // namespace chorus
