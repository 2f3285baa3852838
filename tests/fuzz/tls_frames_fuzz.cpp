// The data plane's frame parser inside TLS (transport/tcp/tcp_connection.cpp over
// transport/tls/tls_channel.cpp): a real session is set up over a socket pair, the input is the
// plaintext the other node sends (encrypted by its channel in records of varying sizes), and the
// connection pumps and decrypts it into a sink that must see what frame_check.hpp says. With the
// input's first byte odd, one byte of the ciphertext is flipped as well: then the connection must
// end (a forged record), having delivered at most what came before it (or park before it, at a
// frame of a later membership epoch).
#include "frame_check.hpp"
#include "transport/tcp/tcp_connection.hpp"

using namespace chorus;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 1 || size > (std::size_t{128} << 10)) return 0;
  const bool flip = data[0] & 1;
  ++data;
  --size;
  fuzz::TlsPair tls;
  // Records of 1, 2, 3, ... KiB of plaintext (a frame's header split across records included).
  std::string wire;
  for (std::size_t at = 0, piece = 1024; at < size; at += piece, piece += 1024)
    wire += tls.seal(data + at, std::min(piece, size - at));
  if (flip && !wire.empty()) wire[wire.size() / 2] ^= 0x20;
  tls.pair.send(wire.data(), wire.size());
  fuzz::RecordingSink sink;
  TcpConnection c(tls.pair.theirs, 1, &sink, std::move(tls.server));
  tls.pair.theirs = -1;
  if (!flip || wire.empty()) {
    fuzz::pump_and_compare(c, sink, data, size);
    return 0;
  }
  Connection::Pumped r = Connection::Pumped::idle;
  for (int pumps = 0; (r = c.pump(4096)) != Connection::Pumped::ended && r != Connection::Pumped::parked;)
    FUZZ_CHECK(++pumps < 1000000, "the connection never ended");
  const fuzz::Expected x = fuzz::read_plainly(data, size);
  // Lost, unless a bye came before the forged record (then all that was meant to come had come);
  // or parked, unread, at a later epoch's frame that came before it.
  if (r == Connection::Pumped::parked) FUZZ_CHECK(x.parked && sink.closed_count == 0, "parked only at a later epoch's frame");
  else FUZZ_CHECK(sink.closed_count == 1 && (!sink.orderly || x.bye), "a forged record ends the connection");
  FUZZ_CHECK(sink.frames.size() <= x.frames.size(), "more frames than were sent");
  for (std::size_t i = 0; i < sink.frames.size(); ++i) {
    FUZZ_CHECK(sink.frames[i].second == x.frames[i].second, "a frame's payload before the forged record");
  }
  return 0;
}
