// The glue that carries one Cap'n Proto message inside a CAF message: the flat word array of the
// message, copied once at encode time. inspect() lets CAF serialize it for remote actors without
// knowing the schema. Decoding checks structure and limits, so a garbled envelope is an error,
// never a crash.
#pragma once
#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace chorus {

struct Envelope {
  std::vector<uint64_t> words;  // the flat-array serialization (segment table + segments)
  bool operator==(const Envelope&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Envelope& x) {
  return f(x.words);
}

// Serializes a built message into an envelope.
Envelope seal(capnp::MessageBuilder& builder);

// An envelope as the bytes of a frame's payload, and back (false when `bytes` is not a whole
// number of words: then it cannot be one).
std::string envelope_bytes(const Envelope& e);
bool bytes_envelope(const void* data, std::size_t bytes, Envelope& e);

// A reader over an envelope; the envelope must outlive it. Limits guard against hostile input:
// it reads at most kReadsPerWord words per word of the envelope, plus kReadSlack (Cap'n Proto's
// traversal limit), and nests at most 32 deep.
class EnvelopeReader {
 public:
  static constexpr uint64_t kReadsPerWord = 4;
  static constexpr uint64_t kReadSlack = 1024;
  explicit EnvelopeReader(const Envelope& e);
  template <class T> typename T::Reader root() { return reader_->getRoot<T>(); }

 private:
  std::unique_ptr<capnp::FlatArrayMessageReader> reader_;
};

// Runs `decode` on a reader of `e`; returns its value, or nullopt with `error` set when the envelope
// is garbled (Cap'n Proto reports malformed input by throwing kj::Exception).
template <class F>
auto open_envelope(const Envelope& e, std::string& error, F&& decode)
    -> std::optional<decltype(decode(std::declval<EnvelopeReader&>()))> {
  try {
    EnvelopeReader r(e);
    return decode(r);
  } catch (const std::exception& ex) {
    error = std::string("garbled message: ") + ex.what();
  } catch (...) {
    error = "garbled message";
  }
  return std::nullopt;
}

} // namespace chorus
