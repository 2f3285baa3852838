#include "messages/link_codec.hpp"

#include <capnp/message.h>

#include <algorithm>
#include <stdexcept>

#include "chorus.capnp.h"

namespace chorus {

Envelope encode_link_lost(const LinkLostData& l) {
  capnp::MallocMessageBuilder mb;
  auto b = mb.initRoot<wire::LinkLost>();
  b.setCollective(l.collective);
  b.setReporter(l.reporter);
  b.setOther(l.other);
  b.setReason(l.reason.substr(0, kMaxLinkReason));
  return seal(mb);
}

std::optional<LinkLostData> decode_link_lost(const Envelope& e, std::string& error) {
  return open_envelope(e, error, [](EnvelopeReader& r) {
    auto m = r.root<wire::LinkLost>();
    LinkLostData d{m.getCollective(), m.getReporter(), m.getOther(), m.getReason()};
    if (d.reporter == d.other) throw std::runtime_error("a link from node " + std::to_string(d.other) + " to itself");
    if (d.reason.size() > kMaxLinkReason)
      throw std::runtime_error("a reason of " + std::to_string(d.reason.size()) + " bytes (at most " +
                               std::to_string(kMaxLinkReason) + ")");
    return d;
  });
}

std::string link_lost_message(const LinkLostData& l) {
  return "the data connection between node " + std::to_string(std::min(l.reporter, l.other)) + " and node " +
         std::to_string(std::max(l.reporter, l.other)) + " broke (node " + std::to_string(l.reporter) +
         " saw: " + l.reason + ")";
}

} // namespace chorus
