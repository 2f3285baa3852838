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
  opts.traversalLimitInWords = 64 * 1024 * 1024;  // control messages are small; bound the work
  opts.nestingLimit = 32;
  reader_ = std::make_unique<capnp::FlatArrayMessageReader>(words, opts);
}

} // namespace chorus
