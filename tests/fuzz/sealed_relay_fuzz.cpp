// The front door's sealed links (front_door.cpp's sealed mode; relay.cpp's TLS side) against a
// client that passed the challenge and completed the TLS handshake keyed by the secret: per input,
// one connection through a sealed door in front of a loopback listener (its "orchestrator"). The
// input's first byte chooses what follows the handshake: even: the rest of the input, encrypted
// as it should be; odd: the rest raw on the socket where records belong (garbage, cut or forged
// records, alerts). Then:
//   encrypted: the orchestrator receives exactly those bytes;
//   raw:       nothing reaches the orchestrator (no record decrypts without the key);
// and every connection ends within the deadline.
#include <poll.h>

#include "fuzz_kit.hpp"
#include "transport/door_passage.hpp"
#include "transport/front_door.hpp"
#include "transport/socket.hpp"

using namespace chorus;


extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 1 || size > (std::size_t{64} << 10)) return 0;
  static fuzz::DoorSetup s(true);
  const bool raw = data[0] & 1;
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  int fd = -1;
  std::unique_ptr<TlsChannel> tls;
  const Status passed = pass_door("127.0.0.1", s.door->port(), fuzz::kSecret, deadline, fd, tls);
  FUZZ_CHECK(passed.is_ok(), "the right secret passes a sealed door: " + passed.to_string());
  FUZZ_CHECK(tls != nullptr, "a sealed door's link is TLS");
  int inner = -1;
  FUZZ_CHECK(tcp_accept(s.inner, deadline, inner).is_ok(), "a right answer reaches the orchestrator");
  std::string wire, why;
  if (raw) wire = rest;
  else FUZZ_CHECK(tls->encrypt(rest.data(), rest.size(), wire, why), "encrypt: " + why);
  (void)write_exact(fd, wire.data(), wire.size(), deadline);  // the door may close first on garbage
  shutdown(fd, SHUT_WR);
  const std::string relayed = fuzz::read_to_end(inner, deadline);
  ::close(inner);
  if (raw) FUZZ_CHECK(relayed.empty(), "raw bytes reached the orchestrator: " + std::to_string(relayed.size()));
  else FUZZ_CHECK(relayed == rest, "the orchestrator received " + std::to_string(relayed.size()) + " bytes of " +
                                       std::to_string(rest.size()));
  (void)fuzz::read_to_end(fd, deadline);
  ::close(fd);
  return 0;
}
