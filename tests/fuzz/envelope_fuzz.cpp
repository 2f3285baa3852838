// Any bytes as an envelope (messages/envelope.hpp): the bytes round-trip through bytes_envelope and
// envelope_bytes, and a reader opened by open_envelope walks the whole message, whatever its
// schema, within the reader's limits: Cap'n Proto's exceptions for garbled input come back as an
// error, never out of open_envelope, and the work of one walk stays proportional to the input.
#include <capnp/any.h>

#include "fuzz_kit.hpp"

namespace {

using namespace chorus;

volatile uint64_t g_sum = 0;  // what the walk read, so that the reads stay

// Visits every struct and pointer below `s`, reading the data sections and lists on the way (depth
// is Cap'n Proto's to bound: the reader's nesting limit throws); returns the number of structs and
// pointers visited.
uint64_t walk(capnp::AnyStruct::Reader s);

uint64_t walk(capnp::AnyPointer::Reader p) {
  switch (p.getPointerType()) {
    case capnp::PointerType::NULL_: return 1;
    case capnp::PointerType::CAPABILITY: return 1;
    case capnp::PointerType::STRUCT: return 1 + walk(p.getAs<capnp::AnyStruct>());
    case capnp::PointerType::LIST: {
      auto list = p.getAs<capnp::AnyList>();
      uint64_t n = 1;
      if (list.getElementSize() == capnp::ElementSize::POINTER) {
        for (auto e : list.as<capnp::List<capnp::AnyPointer>>()) n += walk(e);
      } else if (list.getElementSize() == capnp::ElementSize::INLINE_COMPOSITE) {
        for (auto e : list.as<capnp::List<capnp::AnyStruct>>()) n += walk(e);
      } else {  // a list of primitives is one thing, its bytes read as a whole
        for (auto b : list.getRawBytes()) g_sum = g_sum + b;
      }
      return n;
    }
  }
  return 1;
}

uint64_t walk(capnp::AnyStruct::Reader s) {
  uint64_t n = 1;
  for (auto b : s.getDataSection()) g_sum = g_sum + b;  // read: ASan checks it lies in the input
  for (auto p : s.getPointerSection()) n += walk(p);
  return n;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  Envelope e;
  const bool whole = bytes_envelope(data, size, e);
  FUZZ_CHECK(whole == (size % sizeof(uint64_t) == 0), "bytes_envelope takes whole words only");
  if (!whole) return 0;
  FUZZ_CHECK(envelope_bytes(e) == std::string(reinterpret_cast<const char*>(data), size), "bytes round trip");
  std::string error;
  auto visited = open_envelope(e, error, [](EnvelopeReader& r) { return walk(r.root<capnp::AnyPointer>()); });
  FUZZ_CHECK(visited.has_value() != !error.empty(), "an error exactly when the walk failed");
  // A list of empty structs costs its reader a word per element (Cap'n Proto's amplification
  // rule), so the reader's traversal limit bounds a walk by the envelope's size.
  if (visited)
    FUZZ_CHECK(*visited <= 2 * (EnvelopeReader::kReadsPerWord * e.words.size() + EnvelopeReader::kReadSlack),
               std::to_string(*visited) + " things visited");
  return 0;
}
