#include "actors/orchestrator/basp_server.hpp"

#include <caf/binary_serializer.hpp>
#include <caf/message.hpp>

#include <vector>

namespace chorus {

std::string node_id_bytes(const caf::node_id& node) {
  std::vector<char> buf;
  caf::binary_serializer sink{static_cast<caf::execution_unit*>(nullptr), buf};
  (void)sink(const_cast<caf::node_id&>(node));
  return std::string(buf.begin(), buf.end());
}

BaspServer basp_server(caf::actor_system& sys, uint64_t actor) {
  BaspServer s{node_id_bytes(sys.node()), actor, {}};
  // The payload of the direct message CAF's BASP sends each node it meets (basp_broker's
  // learned_new_node): no forwarding stack, then (sys, get, "info"). A message's serializer
  // needs the actor system (its types).
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  std::vector<caf::strong_actor_ptr> stack;
  auto msg = caf::make_message(caf::sys_atom_v, caf::get_atom_v, std::string("info"));
  if (!sink(stack, msg)) s.info_request.assign(buf.begin(), buf.end());
  return s;
}

} // namespace chorus
