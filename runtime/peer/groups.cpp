// Group agreement: creating a group (new_group, split, intra_node, inter_node) and releasing a
// member's share of it (destroy). In one process the local server checks the member lists and
// hands out the id; across nodes the members agree among themselves (see below) and each node
// adopts the group.
#include <algorithm>

#include "actors/global_client/global_client.hpp"
#include "runtime/peer/op_lanes.hpp"
#include "runtime/peer/run_op.hpp"
#include "runtime/runtime_impl.hpp"

namespace chorus {

namespace {

using peer_impl::no_peer;

// This peer's handle state on group `gid` (members: global ids by rank), sharing its registration.
std::shared_ptr<PeerState> state_for_group(const PeerState& s, uint32_t gid, std::vector<PeerId> members) {
  auto ns = std::make_shared<PeerState>();
  ns->rt = s.rt;
  ns->id = s.id;
  ns->config = s.config;
  ns->epoch = s.epoch;
  ns->offset = s.offset;
  ns->global = s.global;
  ns->flight = s.flight;
  ns->trace = s.trace;
  ns->group = gid;
  ns->members = std::move(members);
  const PeerId me = s.offset + s.id;
  ns->rank = static_cast<uint32_t>(std::find(ns->members.begin(), ns->members.end(), me) - ns->members.begin());
  return ns;
}

// Group creation across nodes: every member sends its member list to the first member (the
// leader) over point-to-point on the world; the leader checks they agree and answers each with
// the new group's id, unique in the job (the leader's global id and its own counter), or with the
// first disagreement. Every member then adopts the group on its node.
constexpr uint64_t kGroupTag = 0xC0C0000000000001ull;  // reserved: user tags stay below 2^63

Result<uint32_t> agree_on_group_across_nodes(PeerState& s, const std::vector<PeerId>& members) {
  const uint32_t total = s.global->total_peers(), me = s.offset + s.id;
  auto bad = [&](const std::string& why) {
    return Status(Errc::invalid_argument, "peer " + std::to_string(me) + ": new group: " + why);
  };
  if (members.empty()) return bad("the member list is empty");
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (members[i] >= total) return bad("member " + std::to_string(members[i]) + " is not a peer");
    for (std::size_t j = 0; j < i; ++j)
      if (members[j] == members[i]) return bad("member " + std::to_string(members[i]) + " is listed twice");
  }
  if (std::find(members.begin(), members.end(), me) == members.end()) return bad("the caller is not in the member list");
  // World point-to-point by global id, whatever handle new_group was called on.
  std::vector<PeerId> everyone(total);
  for (uint32_t i = 0; i < total; ++i) everyone[i] = i;
  Peer world = PeerAccess::make(state_for_group(s, 0, std::move(everyone)));
  auto list_tensor = [](const std::vector<PeerId>& m) {
    std::vector<int64_t> v(m.begin(), m.end());
    return Tensor::from(v);
  };
  auto wrap = [&](const Status& st) { return Status(st.code(), "new group: " + st.message()); };
  const uint32_t leader = members[0];
  auto no_ids = [&] {
    return bad("peer " + std::to_string(leader) + " has used up the group ids it may hand out (list another member first)");
  };
  if (me != leader) {
    Tensor len = Tensor::from(std::vector<int64_t>{static_cast<int64_t>(members.size())});
    if (auto st = world.send(len, leader, kGroupTag); !st) return wrap(st);
    if (auto st = world.send(list_tensor(members), leader, kGroupTag); !st) return wrap(st);
    Tensor answer = Tensor::zeros(DType::i64, {2});
    if (auto st = world.recv(answer, leader, kGroupTag); !st) return wrap(st);
    const int64_t* a = answer.data_as<int64_t>();
    if (a[0] == 2) return no_ids();
    if (a[0] != 0)
      return bad("peer " + std::to_string(a[1]) + " asked for a different member list than peer " +
                 std::to_string(leader) + " (members must pass the same list)");
    return static_cast<uint32_t>(a[1]);
  }
  // The leader: hear every member (in list order), then answer each.
  int64_t verdict = 0, who = 0;
  Status failure;
  for (std::size_t i = 1; i < members.size(); ++i) {
    Tensor len = Tensor::zeros(DType::i64, {1});
    if (auto st = world.recv(len, members[i], kGroupTag); !st) {
      failure = wrap(st);
      break;
    }
    const int64_t n = len.data_as<int64_t>()[0];
    Tensor theirs = Tensor::zeros(DType::i64, {std::max<int64_t>(n, 0)});
    if (auto st = world.recv(theirs, members[i], kGroupTag); !st) {
      failure = wrap(st);
      break;
    }
    std::vector<PeerId> got(theirs.data_as<int64_t>(), theirs.data_as<int64_t>() + n);
    if (got != members && verdict == 0) {
      verdict = 1;
      who = members[i];
    }
  }
  const bool heard_all = failure.is_ok();
  const auto fresh = heard_all && verdict == 0 ? s.rt->next_group_id(me, total) : std::optional<uint32_t>(0);
  if (!fresh) verdict = 2;  // this leader's ids are used up
  const uint32_t gid = fresh.value_or(0);
  // On a failure the members still waiting for an answer time out on their own.
  if (heard_all)
    for (std::size_t i = 1; i < members.size(); ++i) {
      Tensor answer = Tensor::from(std::vector<int64_t>{verdict, verdict == 1 ? who : static_cast<int64_t>(gid)});
      if (auto st = world.send(answer, members[i], kGroupTag); !st) return wrap(st);
    }
  if (!heard_all) return failure;
  if (verdict == 2) return no_ids();
  if (verdict)
    return bad("peer " + std::to_string(who) + " asked for a different member list than peer " + std::to_string(leader) +
               " (members must pass the same list)");
  return gid;
}

} // namespace

Result<Peer> Peer::new_group_now(std::vector<PeerId> members) {
  if (!state_) return no_peer();
  PeerState& s = *state_;
  if (s.finished) return peer_impl::already_finished(s.id);
  uint32_t gid = 0;
  if (s.global) {
    auto agreed = agree_on_group_across_nodes(s, members);
    if (!agreed) return agreed.status();
    gid = *agreed;
    s.rt->core->adopt_group(gid, members);
  } else {
    GroupRequestData g;
    g.members = members;
    Status st;
    auto reply = peer_impl::group_request(s, std::move(g), st);
    if (!st) return st;
    gid = reply->group;
  }
  return Peer(state_for_group(s, gid, std::move(members)));
}

Result<Peer> Peer::split_now(int color, int key) {
  if (!state_) return no_peer();
  // Everyone learns everyone's (color, key); each color's members, ordered by (key, rank here),
  // then create their group together. A negative color joins no group (an empty handle).
  const uint32_t n = size();
  Tensor mine = Tensor::from(std::vector<int64_t>{color, key});
  Tensor all = Tensor::zeros(DType::i64, {static_cast<int64_t>(2 * n)});
  if (auto st = all_gather(mine, all); !st) return st;
  if (color < 0) return Peer();
  const int64_t* v = all.data_as<int64_t>();
  std::vector<std::pair<int64_t, uint32_t>> order;  // (key, rank)
  for (uint32_t r = 0; r < n; ++r)
    if (v[2 * r] == color) order.emplace_back(v[2 * r + 1], r);
  std::sort(order.begin(), order.end());
  std::vector<PeerId> members;
  for (auto& [k, r] : order) members.push_back(state_->members[r]);
  return new_group_now(std::move(members));
}

uint32_t Peer::node() const { return state_ && state_->global ? state_->global->node_id() : 0; }

Result<Peer> Peer::intra_node_now() {
  if (!state_) return no_peer();
  return split_now(static_cast<int>(node()), static_cast<int>(rank()));
}

Result<Peer> Peer::inter_node_now() {
  if (!state_) return no_peer();
  const PeerState& s = *state_;
  // Am I the lowest rank of my node within this group?
  bool leader = true;
  for (uint32_t r = 0; r < s.rank && leader; ++r) {
    const uint32_t node_r = s.global ? s.global->node_of(s.members[r]) : 0;
    if (node_r == node()) leader = false;
  }
  return split_now(leader ? 0 : -1, static_cast<int>(rank()));
}

Status Peer::destroy_now() {
  if (!state_) return no_peer();
  PeerState& s = *state_;
  if (s.group == 0) return {Errc::invalid_argument, "the world group cannot be destroyed; use finish()"};
  if (s.destroyed) return {Errc::invalid_argument, "group " + std::to_string(s.group) + " was already destroyed by this peer"};
  GroupRequestData g;
  g.destroy = true;
  g.group = s.group;
  Status st;
  peer_impl::group_request(s, std::move(g), st);
  if (st) s.destroyed = true;
  return st;
}

// Each runs on the handle's lane, after the ops handed in before it (its own steps inline there).
using peer_impl::in_lane;

Result<Peer> Peer::new_group(std::vector<PeerId> members) {
  return in_lane<Result<Peer>>(state_, [&] { return new_group_now(std::move(members)); });
}
Result<Peer> Peer::split(int color, int key) {
  return in_lane<Result<Peer>>(state_, [&] { return split_now(color, key); });
}
Result<Peer> Peer::intra_node() { return in_lane<Result<Peer>>(state_, [&] { return intra_node_now(); }); }
Result<Peer> Peer::inter_node() { return in_lane<Result<Peer>>(state_, [&] { return inter_node_now(); }); }
Status Peer::destroy() {
  if (auto e = peer_impl::wait_for_p2p(state_.get()); !e) return e;
  return in_lane<Status>(state_, [&] { return destroy_now(); });
}

} // namespace chorus
