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

namespace {

struct Setup {
  int inner = -1;
  uint16_t inner_port = 0;
  std::unique_ptr<FrontDoor> door;
  Setup() {
    FUZZ_CHECK(tcp_listen("127.0.0.1", 0, inner, inner_port).is_ok(), "inner listener");
    FrontDoor::Options o;
    o.inner_port = inner_port;
    o.secret = fuzz::kSecret;
    o.seal = true;
    auto d = FrontDoor::open(o);
    FUZZ_CHECK(d.is_ok(), d.status().to_string());
    door = std::move(*d);
  }
};

Setup& setup() {
  static Setup s;
  return s;
}

// Everything until the other end closes (a reset ends it too), before the deadline.
std::string read_to_end(int fd, Clock::time_point deadline) {
  std::string got;
  char buf[16384];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    FUZZ_CHECK(left > 0, "the connection did not end in time (" + std::to_string(got.size()) + " bytes read)");
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t r = recv(fd, buf, sizeof buf, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return got;
    got.append(buf, static_cast<std::size_t>(r));
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 1 || size > (std::size_t{64} << 10)) return 0;
  Setup& s = setup();
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
  const std::string relayed = read_to_end(inner, deadline);
  ::close(inner);
  if (raw) FUZZ_CHECK(relayed.empty(), "raw bytes reached the orchestrator: " + std::to_string(relayed.size()));
  else FUZZ_CHECK(relayed == rest, "the orchestrator received " + std::to_string(relayed.size()) + " bytes of " +
                                       std::to_string(rest.size()));
  (void)read_to_end(fd, deadline);
  ::close(fd);
  return 0;
}
