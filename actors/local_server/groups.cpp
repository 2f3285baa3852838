// The local server core: creating, adopting and destroying groups.
#include "actors/local_server/server_core.hpp"

#include <algorithm>

#include "actors/global_client/global_client.hpp"

namespace chorus {

void LocalServerCore::adopt_group(uint32_t gid, const std::vector<uint32_t>& members) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!config_ || groups_.count(gid)) return;
  groups_[gid] = Group{members, std::vector<bool>(members.size(), false)};
}

const LocalServerCore::Group* LocalServerCore::group_of(uint32_t gid, uint32_t peer, Status& error) const {
  auto it = groups_.find(gid);
  if (it == groups_.end()) {
    error = {Errc::invalid_argument, "group " + std::to_string(gid) + " does not exist (never created, or destroyed)"};
    return nullptr;
  }
  const auto& m = it->second.members;
  auto pos = std::find(m.begin(), m.end(), peer);
  if (pos == m.end()) {
    std::string list;
    for (std::size_t i = 0; i < m.size(); ++i) list += (i ? ", " : "") + std::to_string(m[i]);
    error = {Errc::invalid_argument, "peer " + std::to_string(peer) + " is not a member of group " +
                                         std::to_string(gid) + " [" + list + "]"};
    return nullptr;
  }
  if (it->second.released[pos - m.begin()]) {
    error = {Errc::invalid_argument, "peer " + std::to_string(peer) + " already destroyed group " + std::to_string(gid)};
    return nullptr;
  }
  return &it->second;
}

void LocalServerCore::on_group(Call call) {
  std::lock_guard<std::mutex> lk(mu_);
  if (closed_) return call.reply->complete(*closed_);
  // Out of the call, which moves on into the pending group below.
  const GroupRequestData req = std::move(call.group);
  if (auto s = check_caller(req.peer, req.epoch); !s) return call.reply->complete(s);
  if (req.destroy) {
    Status e;
    if (req.group == 0) return call.reply->complete({Errc::invalid_argument, "the world group cannot be destroyed"});
    const uint32_t who = global_ ? global_->offset() + req.peer : req.peer;  // members are global ids
    const Group* g = group_of(req.group, who, e);
    if (!g) return call.reply->complete(e);
    Group& gm = groups_[req.group];
    gm.released[std::find(gm.members.begin(), gm.members.end(), who) - gm.members.begin()] = true;
    // Across nodes only this node's members release their share here.
    if (global_) {
      bool all_local_released = true;
      for (std::size_t i = 0; i < gm.members.size(); ++i)
        if (gm.members[i] >= global_->offset() && gm.members[i] < global_->offset() + config_->num_devices && !gm.released[i])
          all_local_released = false;
      if (all_local_released) groups_.erase(req.group);
      return call.reply->complete(Status::ok());
    }
    if (std::all_of(gm.released.begin(), gm.released.end(), [](bool b) { return b; })) groups_.erase(req.group);
    return call.reply->complete(Status::ok());
  }
  if (global_)  // across nodes, members agree in Peer::new_group and each node adopts the group
    return call.reply->complete({Errc::internal, "group creation request reached the server in multi-node mode"});
  const auto& m = req.members;
  const uint32_t n = config_->num_devices;
  auto bad = [&](std::string why) {
    call.reply->complete({Errc::invalid_argument, "peer " + std::to_string(req.peer) + ": new group: " + why});
  };
  if (m.empty()) return bad("the member list is empty");
  for (std::size_t i = 0; i < m.size(); ++i) {
    if (m[i] >= n) return bad("member " + std::to_string(m[i]) + " is not a peer");
    for (std::size_t j = 0; j < i; ++j)
      if (m[j] == m[i]) return bad("member " + std::to_string(m[i]) + " is listed twice");
  }
  if (std::find(m.begin(), m.end(), req.peer) == m.end()) return bad("the caller is not in the member list");
  auto [it, fresh] = pending_groups_.try_emplace(m);
  PendingGroup& pg = it->second;
  if (fresh) {
    pg.timer = next_timer_++;
    group_timers_[pg.timer] = m;
  }
  call.reply->timer = pg.timer;
  if (pg.arrivals.count(req.peer)) return bad("asked twice for the same group at once");
  pg.arrivals.emplace(req.peer, std::move(call));
  if (pg.arrivals.size() < m.size()) return;
  const uint32_t gid = next_group_++;
  groups_[gid] = Group{m, std::vector<bool>(m.size(), false)};
  for (auto& [peer, c] : pg.arrivals) {
    c.reply->group = gid;
    c.reply->complete(Status::ok());
  }
  group_timers_.erase(pg.timer);
  pending_groups_.erase(it);
}

} // namespace chorus
