#include "actors/local_server/local_server.hpp"

#include "actors/local_server/server_core.hpp"

namespace chorus {

local_server_actor::behavior_type local_server(local_server_actor::pointer, std::shared_ptr<LocalServerCore> core) {
  return {
      [core](register_atom, Call& c) { core->on_register(std::move(c)); },
      [core](finish_atom, Call& c) { core->on_finish(std::move(c)); },
      [core](reset_atom, Call& c) { core->on_reset(std::move(c)); },
  };
}

} // namespace chorus
