#include "observability/trace/peer_trace.hpp"

#include <algorithm>

#include "observability/flight/flight_clock.hpp"

namespace chorus {

uint64_t PeerTrace::now() { return flight_clock::now(); }

void PeerTrace::begin(OpSpan& o, const FlightOp& op) {
  const uint64_t t = now();
  o = OpSpan{};
  o.begin = t;
  o.op = op;
  o.op.op = op.described();
  o.op.data = nullptr;  // the caller's tensor: what it names is kept here and below
  o.has_data = op.data && op.data->defined();
  if (o.has_data) {
    const Shape& shape = op.data->shape();
    o.bytes = op.data->nbytes();
    o.dims = static_cast<uint8_t>(std::min<std::size_t>(shape.size(), UINT8_MAX));
    std::copy_n(shape.begin(), std::min(shape.size(), kTraceDims), o.shape.begin());
  }
}

void PeerTrace::matched(OpSpan& o, const RunStrategy& strategy) {
  o.matched = now();
  o.strategy = strategy;
}

void PeerTrace::end(OpSpan& o, const Status& status) {
  o.end = now();
  std::string error = status ? std::string() : status.to_string();
  std::lock_guard<std::mutex> lk(mu_);
  if (!status) {
    errors_.push_front(std::move(error));
    o.error = &errors_.front();
  }
  if (!ops_.push(o) && o.error) errors_.pop_front();  // dropped: nothing points to it
}

void PeerTrace::step(const StepSpan& s) {
  const StepRecord r{s, now(), false};
  std::lock_guard<std::mutex> lk(mu_);
  steps_.push(r);
}

void PeerTrace::concluded(uint64_t begin) {
  StepSpan s;
  s.begin = begin;
  const StepRecord r{s, now(), true};
  std::lock_guard<std::mutex> lk(mu_);
  steps_.push(r);
}

} // namespace chorus
