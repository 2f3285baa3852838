// The one rule every node applies to the announcements of an op (messages/data_codec.hpp:
// OpAnnouncement, what a node tells every other node when all of its peers have called one
// collective op), so that a disagreement gives every peer of every node the same error.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <chorus/status.hpp>
#include "messages/data_codec.hpp"

namespace chorus {

// "all_reduce sum of f32[4, 4]"
std::string describe(const OpAnnouncement& a);

// The error of op `seq` given every node's announcement (indexed by node; present for every node
// that takes part, the others skipped), or ok: the lowest node whose peers disagree among
// themselves, else the first node that differs from the lowest, with the code of the first field
// that differs. Reads them where they lie (no copy: this runs once per op and peer).
Status judge_announcements(const std::vector<std::optional<OpAnnouncement>>& by_node,
                           const std::vector<bool>& takes_part, uint64_t seq);
// The error a node reports for its own peers' disagreement, worded as every other node words it.
Status node_failure(const OpAnnouncement& a, uint64_t seq);
// The first difference between two announcements (ok when they agree).
Status compare_announcements(const OpAnnouncement& first, const OpAnnouncement& other, uint64_t seq);

} // namespace chorus
