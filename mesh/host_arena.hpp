// The arena of a job whose nodes all lie on one host (strategies/arena.hpp): node 0 makes it and
// offers it to every other node in a frame on their data connection; each maps it, checks it and
// answers; node 0 opens it once every node has mapped it, and closes it for good where one could
// not (a peer skips a closed arena). The frames: actors/global_client/host_arena.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <chorus/config.hpp>
#include "messages/node_codec.hpp"
#include "strategies/arena.hpp"
#include "transport/shm/segment.hpp"

namespace chorus {

// Whether the job's nodes (two or more) all lie on one host: then node 0 offers an arena (maybe
// none) and every other node answers, whatever its own settings, so that nobody waits for a frame
// that never comes.
bool one_host(const TopologyData& t);
// The slot size of the arena this node takes part in: 0 where it takes none (not one_host, the
// host's transport forced onto the network, or the arena turned off in this process).
std::size_t host_arena_slot(const Config& config, const TopologyData& t);
// Node 0: a new arena for every peer of the job; an empty segment (offered as none, so the others
// decline) where it cannot be made.
std::shared_ptr<SharedSegment> make_host_arena(const TopologyData& t, std::size_t slot);
// Another node: the arena node 0 offered, mapped and checked; null (and `why`) where it cannot be.
std::shared_ptr<ArenaSeat> take_host_arena(const TopologyData& t, const SharedSegment::Offer& offer, std::size_t slot,
                                           std::string& why);
// Node 0, once every node answered (`without`: those that could not map it): the arena opened
// (its seat) when every node has it, else closed and null. Nobody may open the segment after.
std::shared_ptr<ArenaSeat> settle_host_arena(const TopologyData& t, SharedSegment& segment,
                                             const std::vector<uint32_t>& without);

} // namespace chorus
