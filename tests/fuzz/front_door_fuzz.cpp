// The front door's side of its handshake (transport/front_door.cpp, door_handshake.cpp) against
// any client: one door with a secret in front of a loopback listener (its "orchestrator"), and per
// input one connection that reads the door's greeting, then sends the input and closes. The
// input's first byte chooses whether the client answers the challenge rightly (odd: the right
// proof goes first, the rest of the input after it) or sends the input as its answer. Then:
//   right answer: the door says so with its own proof, and the orchestrator receives exactly the
//                 bytes after the answer;
//   wrong:        the door says "N" (or hangs up on a client that closed before 32 bytes), and
//                 nothing reaches the orchestrator;
// and every connection ends within the deadline.
#include <poll.h>

#include <vector>

#include "fuzz_kit.hpp"
#include "transport/door_handshake.hpp"
#include "transport/front_door.hpp"
#include "transport/socket.hpp"

using namespace chorus;


extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 1 || size > (std::size_t{64} << 10)) return 0;
  static fuzz::DoorSetup s(false);
  const bool answer_right = data[0] & 1;
  ++data;
  --size;
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  int fd = -1;
  FUZZ_CHECK(tcp_connect("127.0.0.1", s.door->port(), deadline, fd).is_ok(), "connect to the door");
  door::Greeting g{};
  FUZZ_CHECK(read_exact(fd, g.data(), g.size(), deadline).is_ok(), "the door's greeting");
  door::Mode mode{};
  FUZZ_CHECK(door::read_greeting(g, mode) && mode == door::Mode::challenge, "the door greets with a challenge");
  door::Nonce nonce{};
  nonce.fill(7);  // the client's: any value serves, the door's nonce is fresh
  door::Answer client{};
  door::Proof server{};
  FUZZ_CHECK(door::make_answer(fuzz::kSecret, g, nonce, client), "HMAC");
  FUZZ_CHECK(door::make_proof(fuzz::kSecret, g, nonce, door::Role::server, server), "HMAC");
  std::string sent(reinterpret_cast<const char*>(data), size);
  if (answer_right) sent.insert(0, reinterpret_cast<const char*>(client.data()), client.size());
  FUZZ_CHECK(write_exact(fd, sent.data(), sent.size(), deadline).is_ok(), "send to the door");
  shutdown(fd, SHUT_WR);
  const bool right = sent.size() >= client.size() && std::memcmp(sent.data(), client.data(), client.size()) == 0;
  if (right) {
    int inner = -1;
    FUZZ_CHECK(tcp_accept(s.inner, deadline, inner).is_ok(), "a right answer reaches the orchestrator");
    const std::string relayed = fuzz::read_to_end(inner, deadline);
    ::close(inner);
    FUZZ_CHECK(relayed == sent.substr(client.size()), "the orchestrator received " + std::to_string(relayed.size()) +
                                                           " bytes of the " + std::to_string(sent.size() - client.size()) +
                                                           " after the answer");
  }
  const std::string verdict = fuzz::read_to_end(fd, deadline);
  ::close(fd);
  if (right) {
    std::string expected(1, static_cast<char>(door::kAccepted));
    expected.append(reinterpret_cast<const char*>(server.data()), server.size());
    FUZZ_CHECK(verdict == expected, "a right answer is accepted with the door's proof");
  } else {
    // "N" once 64 bytes came; nothing for a shorter answer. (A reset, for the bytes the door left
    // unread, may discard the "N" on its way.)
    FUZZ_CHECK(verdict.empty() || verdict == std::string(1, static_cast<char>(door::kRejected)),
               "a wrong answer is refused, got " + std::to_string(verdict.size()) + " bytes");
    pollfd p{s.inner, POLLIN, 0};
    FUZZ_CHECK(poll(&p, 1, 0) == 0, "a wrong answer reached the orchestrator");
  }
  return 0;
}
