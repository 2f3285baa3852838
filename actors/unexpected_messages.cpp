#include "actors/unexpected_messages.hpp"

#include <caf/message_view.hpp>
#include <caf/sec.hpp>

#include <atomic>
#include <string>

#include "core/log.hpp"

namespace chorus {

namespace {
std::atomic<uint64_t> dropped{0};
} // namespace

void drop_unexpected_quietly(caf::scheduled_actor* self) {
  self->set_default_handler([](caf::scheduled_actor* who, caf::message_view& x) -> caf::result<caf::message> {
    const uint64_t n = ++dropped;
    CHORUS_LOG(trace, orch, LogWhere{},
               std::string(who->name()) + " dropped an unexpected message (" + std::to_string(n) +
                   " in this process so far): " + x.content().stringify());
    return caf::sec::unexpected_message;
  });
}

uint64_t unexpected_messages() { return dropped.load(); }

} // namespace chorus
