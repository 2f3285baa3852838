#include "actors/trace/peer_trace.hpp"

#include <algorithm>

#include "actors/flight/flight_clock.hpp"

namespace chorus {

uint64_t PeerTrace::now() { return flight_clock::now(); }

void PeerTrace::begin(const FlightOp& op) {
  const uint64_t t = now();
  OpSpan& o = open_;
  o = OpSpan{};
  o.begin = t;
  o.op = op;
  o.op.data = nullptr;  // the caller's tensor: what it names is copied below
  o.has_data = op.data && op.data->defined();
  if (o.has_data) {
    const Shape& shape = op.data->shape();
    o.dtype = op.data->dtype();
    o.bytes = op.data->nbytes();
    o.dims = static_cast<uint8_t>(std::min<std::size_t>(shape.size(), UINT8_MAX));
    std::copy_n(shape.begin(), std::min(shape.size(), kTraceDims), o.shape.begin());
  }
  in_op_ = true;
}

void PeerTrace::matched(const RunStrategy& strategy) {
  if (!in_op_) return;
  open_.matched = now();
  open_.strategy = strategy;
}

void PeerTrace::end(const Status& status) {
  if (!in_op_) return;
  in_op_ = false;
  open_.end = now();
  if (!status) {
    errors_.push_front(status.to_string());
    open_.error = &errors_.front();
  }
  if (!ops_.push(open_) && open_.error) errors_.pop_front();  // dropped: nothing points to it
}

void PeerTrace::step(const StepSpan& s) { steps_.push(StepRecord{s, now(), false}); }

void PeerTrace::concluded(uint64_t begin) {
  StepSpan s;
  s.begin = begin;
  steps_.push(StepRecord{s, now(), true});
}

} // namespace chorus
