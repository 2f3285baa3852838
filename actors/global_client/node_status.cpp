#include "actors/global_client/node_status.hpp"

#include <unistd.h>

#include <chrono>

#include "observability/flight/flight_recorder.hpp"
#include "actors/global_client/global_client.hpp"
#include "actors/local_server/op_validation.hpp"
#include "actors/local_server/server_core.hpp"
#include "core/op_kinds.hpp"

namespace chorus {

namespace {

std::string op_of(const FlightRow& r) {
  return r.collective() ? "group " + std::to_string(r.op.group) + " #" + std::to_string(r.op.seq) + " " + r.describe()
                        : "group " + std::to_string(r.op.group) + " " + r.describe();
}

// A world op waiting in the host's arena (strategies/arena.hpp) before it reached the local
// server: the peers of the job that have not called it yet.
std::string arena_waits_for(const FlightRow& r, const GlobalClient& client) {
  const auto seat = client.arena();
  if (r.op.group != 0 || !seat || !seat->arena.usable()) return {};
  const auto missing = seat->arena.not_posted(r.op.seq);
  if (missing.empty()) return {};
  return peer_names(std::vector<int>(missing.begin(), missing.end())) + " (not called yet)";
}

// What an op in flight waits for. The local server, the arena and the NetOp are asked one after
// the other, never holding one's lock while taking the other's.
std::string waits_for(const FlightRow& r, const LocalServerCore& core, GlobalClient& client) {
  if (!r.collective() && r.other == kAnySource) return "a send from any rank with tag " + std::to_string(r.tag);
  if (!r.collective())
    return std::string("the matching ") + (r.op.kind == OpKind::send ? "recv" : "send") + " of rank " + std::to_string(r.other);
  if (r.state != FlightState::waiting) return client.op_waits_for(r.op.group, r.op.seq);
  std::string local = core.op_waits_for(r.op.group, r.op.seq);
  return local.empty() ? arena_waits_for(r, client) : local;
}

} // namespace

NodeStatusData node_status(const FlightRecorder* flight, const LocalServerCore& core, GlobalClient& client) {
  NodeStatusData n;
  n.node = client.node_id();
  n.pid = ::getpid();
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) n.host = host;
  if (!flight) {
    n.note = "the flight recorder is off (Config::flight_recorder 0): its peers' ops are not known";
    return n;
  }
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  const uint32_t offset = client.offset();
  const auto newest = flight->newest();
  for (uint32_t p = 0; p < newest.size(); ++p) {
    PeerStatusData s;
    s.rank = offset + p;
    if (const auto& r = newest[p]) {
      s.busy = r->state == FlightState::waiting || r->state == FlightState::running;
      s.group = r->op.group;
      s.seq = r->op.seq;
      if (s.busy) {
        s.op = r->describe();
        s.state = std::string(to_string(r->state));
        s.waited_ns = now - r->enter_ns;
        s.waiting_for = waits_for(*r, core, client);
      } else {
        s.last_done = op_of(*r) + (r->state == FlightState::failed ? " (failed: " + r->error + ")" : "");
      }
    }
    n.peers.push_back(std::move(s));
  }
  return n;
}

} // namespace chorus
