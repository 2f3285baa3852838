#include "messages/envelope.hpp"

#include <cstring>
#include <stdexcept>

namespace chorus {

Envelope seal(capnp::MessageBuilder& builder) {
  kj::Array<capnp::word> flat = capnp::messageToFlatArray(builder);
  Envelope e;
  e.words.resize(flat.size());
  std::memcpy(e.words.data(), flat.begin(), flat.size() * sizeof(capnp::word));
  return e;
}

std::string envelope_bytes(const Envelope& e) {
  return std::string(reinterpret_cast<const char*>(e.words.data()), e.words.size() * sizeof(uint64_t));
}

bool bytes_envelope(const void* data, std::size_t bytes, Envelope& e) {
  if (bytes % sizeof(uint64_t) != 0) return false;
  e.words.resize(bytes / sizeof(uint64_t));
  if (bytes > 0) std::memcpy(e.words.data(), data, bytes);
  return true;
}

EnvelopeReader::EnvelopeReader(const Envelope& e) {
  if (e.words.empty()) throw std::runtime_error("empty envelope");
  kj::ArrayPtr<const capnp::word> words(reinterpret_cast<const capnp::word*>(e.words.data()),
                                        e.words.size());
  capnp::ReaderOptions opts;
  // Reading costs Cap'n Proto a word of this budget per word read, and one per element of a list
  // of empty structs, which a sender can claim by the million in a few bytes (a 40-byte message
  // decoded into 60 million topology entries: 3 GiB). A budget in proportion to the envelope keeps
  // a decoder's work and allocations in proportion to what arrived: decoders read each part of a
  // message once (a copy of a part, as decode_node_register makes, at most once more).
  opts.traversalLimitInWords = kReadsPerWord * e.words.size() + kReadSlack;
  opts.nestingLimit = 32;
  reader_ = std::make_unique<capnp::FlatArrayMessageReader>(words, opts);
}

} // namespace chorus
