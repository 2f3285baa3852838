// GlobalClient::share_arena: the host's arena (mesh/host_arena.hpp) offered and answered in frames
// on the data connections, once they carry frames: the same whether a link is new or was kept from
// the epoch before (a kept link has no raw socket left to exchange bytes on).
#include "actors/global_client/global_client.hpp"

#include <cstring>

#include "core/log.hpp"
#include "mesh/host_arena.hpp"

namespace chorus {

Status GlobalClient::share_arena(Clock::time_point deadline) {
  if (!one_host(topo_)) return Status::ok();
  const std::size_t slot = host_arena_slot(config_, topo_);  // 0: none here, but offered and answered
  const uint32_t me = topo_.node_id, n = topo_.num_nodes;
  // The wait ends at the answers, or at once when a node is lost (end_every_op tops the word).
  auto waited = [&](uint32_t count, const char* what) -> Status {
    if (!poller_.wait(arena_word_, count, deadline)) return Status(Errc::timeout, std::string("the host's arena: ") + what);
    return lost();
  };
  std::shared_ptr<ArenaSeat> seat;
  if (me == 0) {
    auto segment = slot ? make_host_arena(topo_, slot) : std::make_shared<SharedSegment>();  // empty: offers none
    const SharedSegment::Offer offer = segment->describe();
    const std::string body(reinterpret_cast<const char*>(&offer), sizeof offer);
    for (uint32_t j = 1; j < n; ++j) conns_[j]->send(SendTicket::owning(frame_header(FrameType::arena_offer), body));
    if (auto s = waited(n - 1, "not every node answered its offer in time"); !s.is_ok()) return s;
    std::vector<uint32_t> without;
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (uint32_t j = 1; j < n; ++j)
        if (arena_answers_[j] != 1) without.push_back(j);
    }
    seat = settle_host_arena(topo_, *segment, without);
  } else {
    if (auto s = waited(1, "node 0 did not offer it in time"); !s.is_ok()) return s;
    SharedSegment::Offer offer;
    {
      std::lock_guard<std::mutex> lk(mu_);
      offer = *arena_offer_;
    }
    std::string why;
    seat = take_host_arena(topo_, offer, slot, why);
    if (!seat && slot) CHORUS_LOG(warn, shm, (LogWhere{me}), "no arena for the host's small ops (" + why + ")");
    const std::string answer(1, seat ? '\1' : '\0');
    conns_[0]->send(SendTicket::owning(frame_header(FrameType::arena_answer), answer));
  }
  bool lost_meanwhile = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    arena_ = seat;
    lost_meanwhile = lost_.has_value();
  }
  if (seat && lost_meanwhile) seat->arena.close();  // no peer waits there for a node gone
  return Status::ok();
}

void GlobalClient::arena_frame(uint32_t node, const FrameHeader& h, const std::string& bytes) {
  if (h.type == FrameType::arena_offer ? bytes.size() != sizeof(SharedSegment::Offer) : bytes.size() != 1)
    return on_node_lost(node, "node " + std::to_string(node) + " sent a garbled arena frame");
  uint32_t count = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (h.type == FrameType::arena_offer && node == 0 && topo_.node_id != 0 && !arena_offer_) {
      arena_offer_.emplace();
      std::memcpy(&*arena_offer_, bytes.data(), sizeof(SharedSegment::Offer));
      count = 1;
    } else if (h.type == FrameType::arena_answer && topo_.node_id == 0 && node > 0 && node < arena_answers_.size() &&
               arena_answers_[node] == 0) {
      arena_answers_[node] = bytes[0] == '\1' ? 1 : 2;
      count = ++arena_answered_;
    }
  }
  if (count) arena_word_.set(count);  // outside the lock: it may wake a thread
}

} // namespace chorus
