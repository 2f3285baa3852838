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
