#include "mesh/host_arena.hpp"

#include <sys/mman.h>

#include "core/log.hpp"
#include "strategies/tuning.hpp"

namespace chorus {

namespace {

// What an attaching node checks the arena against: this collective's id and token.
uint64_t arena_tag(const TopologyData& t) { return t.collective * 0x9E3779B97F4A7C15ull ^ t.token; }

// The arena's memory as peer handles hold it: unmapped with the last of them.
std::shared_ptr<ArenaSeat> seat_of(Arena arena, SharedSegment& segment) {
  auto seat = std::make_shared<ArenaSeat>();
  const std::size_t bytes = segment.bytes();
  seat->memory = std::shared_ptr<void>(segment.release_mapping(), [bytes](void* p) { munmap(p, bytes); });
  seat->arena = arena;
  seat->across_nodes = true;
  return seat;
}

} // namespace

bool one_host(const TopologyData& t) {
  if (t.num_nodes < 2) return false;
  for (const auto& n : t.nodes)
    if (n.host != t.nodes[0].host) return false;
  return true;
}

std::size_t host_arena_slot(const Config& config, const TopologyData& t) {
  if (config.host_transport != HostTransport::automatic || !one_host(t)) return 0;
  return arena_slot_bytes(t.total_peers);
}

std::shared_ptr<SharedSegment> make_host_arena(const TopologyData& t, std::size_t slot) {
  auto seg = SharedSegment::make("chorus-arena", Arena::region_bytes(t.total_peers, slot));
  if (!seg.is_ok()) {
    CHORUS_LOG(warn, shm, (LogWhere{t.node_id}), "no arena for the host's small ops: " + seg.status().message());
    return std::make_shared<SharedSegment>();
  }
  auto made = std::make_shared<SharedSegment>(std::move(*seg));
  Arena::create(made->base(), t.total_peers, slot, arena_tag(t));
  return made;
}

std::shared_ptr<ArenaSeat> take_host_arena(const TopologyData& t, const SharedSegment::Offer& offer, std::size_t slot,
                                           std::string& why) {
  if (slot == 0) {
    why = "the arena or shared memory is turned off in this process";
    return nullptr;
  }
  auto taken = SharedSegment::take(offer, Arena::region_bytes(t.total_peers, slot), why);
  if (!taken.is_ok()) {
    why = taken.status().message();
    return nullptr;
  }
  if (!taken->mapped()) return nullptr;
  Arena arena = Arena::attach(taken->base(), taken->bytes(), arena_tag(t), why);
  if (!arena.valid()) return nullptr;
  return seat_of(arena, *taken);
}

std::shared_ptr<ArenaSeat> settle_host_arena(const TopologyData& t, SharedSegment& segment,
                                             const std::vector<uint32_t>& without) {
  if (!segment.mapped()) return nullptr;
  std::string why;
  Arena made = Arena::attach(segment.base(), segment.bytes(), arena_tag(t), why);
  segment.forget_descriptor();  // every node answered: nobody else may open it any more
  if (!without.empty()) {
    made.close();  // a peer skips a closed arena
    CHORUS_LOG(warn, shm, (LogWhere{t.node_id}),
               "no arena for the host's small ops: node " + std::to_string(without[0]) + " could not map it");
    return nullptr;
  }
  made.open();
  CHORUS_LOG(info, shm, (LogWhere{t.node_id}),
             "the host's small ops meet in an arena of " + std::to_string(segment.bytes() >> 10) + " KiB");
  return seat_of(made, segment);
}

} // namespace chorus
