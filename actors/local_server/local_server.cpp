#include "actors/local_server/local_server.hpp"

#include "actors/local_server/server_core.hpp"

namespace chorus {

caf::behavior local_server(caf::event_based_actor* self) {
  auto core = std::make_shared<LocalServerCore>([self](uint64_t key, std::chrono::milliseconds after) {
    self->delayed_send(self, after, timeout_atom::value, key);
  });
  return local_server_sharing(self, std::move(core));
}

caf::behavior local_server_sharing(caf::event_based_actor*, std::shared_ptr<LocalServerCore> core) {
  return {
      [core](register_atom, Call& c) { core->on_register(std::move(c)); },
      [core](finish_atom, Call& c) { core->on_finish(std::move(c)); },
      [core](reset_atom, Call& c) { core->on_reset(std::move(c)); },
      [core](op_atom, Call& c) { core->on_op(std::move(c)); },
      [core](group_atom, Call& c) { core->on_group(std::move(c)); },
      [core](timeout_atom, uint64_t key) { core->on_timeout(key); },
  };
}

} // namespace chorus
