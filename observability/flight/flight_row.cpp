#include "observability/flight/flight_row.hpp"

#include "core/op_kinds.hpp"

namespace chorus {

std::string_view to_string(FlightState s) {
  switch (s) {
    case FlightState::waiting: return "waiting";
    case FlightState::running: return "running";
    case FlightState::done: return "done";
    case FlightState::failed: return "failed";
  }
  return "?";
}

bool parse_flight_state(std::string_view text, FlightState& s) {
  for (FlightState c : {FlightState::waiting, FlightState::running, FlightState::done, FlightState::failed})
    if (to_string(c) == text) {
      s = c;
      return true;
    }
  return false;
}

std::string FlightRow::describe() const {
  std::string d(to_string(op.kind));
  if (has_data) {
    d += ' ';
    d += to_string(op.dtype);
    d += shape_string(shape);
  }
  if (reduces(op.kind)) {
    d += ' ';
    d += to_string(op.redop);
  }
  auto field = [&d](const char* name, uint64_t v) {
    d += name;
    d += std::to_string(v);
  };
  if (rooted(op.kind)) field(" root ", static_cast<uint32_t>(op.root));  // as the caller gave it
  if (op.kind == OpKind::send) field(" to ", other);
  if (op.kind == OpKind::recv && other == kAnySource) d += " from any";
  else if (op.kind == OpKind::recv) field(" from ", other);
  if (op.kind == OpKind::send || op.kind == OpKind::recv) field(" tag ", tag);
  return d;
}

bool FlightRow::same_call(const FlightRow& o) const {
  if (op.kind != o.op.kind || has_data != o.has_data) return false;
  if (has_data && (op.dtype != o.op.dtype || shape != o.shape)) return false;
  if (reduces(op.kind) && op.redop != o.op.redop) return false;
  return !rooted(op.kind) || op.root == o.op.root;
}

} // namespace chorus
