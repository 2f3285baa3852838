// The client's side of the front door's handshake (transport/door_passage.cpp, pass_door; and
// door_handshake.cpp's read_greeting) against anything that listens where the orchestrator should
// be: per input, a hostile "door" accepts the connection, sends the input and closes (reading and
// dropping what the client sends). With the input's first byte odd and a challenge greeting at the
// start of the rest, the door knows the secret: it checks the client's answer is the right proof
// and sends "Y" and its own right proof before the rest of the input. pass_door must end before its
// deadline with one of its documented errors, and succeed only past a real door: a challenge
// answered by the door's right proof (a client with a secret refuses an open door).
#include <poll.h>

#include <condition_variable>
#include <mutex>

#include "fuzz_kit.hpp"
#include "transport/door_handshake.hpp"
#include "transport/door_passage.hpp"
#include "transport/socket.hpp"

using namespace chorus;

namespace {

// Whether `bytes` start with a greeting of `mode` (and then the greeting).
bool greets(const std::string& bytes, door::Mode want, door::Greeting& g) {
  if (bytes.size() < g.size()) return false;
  std::memcpy(g.data(), bytes.data(), g.size());
  door::Mode mode{};
  return door::read_greeting(g, mode) && mode == want;
}

// The hostile door: serves each connection with the current input.
class HostileDoor {
 public:
  HostileDoor() {
    FUZZ_CHECK(tcp_listen("127.0.0.1", 0, listener_, port_).is_ok(), "listener");
    std::thread([this] { serve(); }).detach();  // lives as long as the process
  }
  uint16_t port() const { return port_; }
  void set(std::string input, bool knows_secret) {
    std::lock_guard<std::mutex> lk(mu_);
    input_ = std::move(input);
    knows_ = knows_secret;
    client_answer_ok_ = true;
  }
  bool client_answer_ok() {
    std::lock_guard<std::mutex> lk(mu_);
    return client_answer_ok_;
  }

 private:
  void serve() {
    for (;;) {
      int fd = -1;
      if (!tcp_accept(listener_, Clock::now() + std::chrono::hours(1), fd).is_ok()) continue;
      std::string input;
      bool knows;
      {
        std::lock_guard<std::mutex> lk(mu_);
        input = input_;
        knows = knows_;
      }
      const auto deadline = Clock::now() + std::chrono::seconds(2);
      door::Greeting g{};
      if (knows && (greets(input, door::Mode::challenge, g) || greets(input, door::Mode::sealed, g))) {
        // A door that knows the secret: greeting, the client's answer checked, "Y" and its proof.
        // (Its proof is bound to the client's nonce, read with the answer.) A sealed one then
        // sends the rest of the input where its TLS handshake should be.
        door::Proof expected{}, mine{};
        door::Answer answer{};
        std::string out = input.substr(0, g.size());
        (void)write_exact(fd, out.data(), out.size(), deadline);
        const bool answered = read_exact(fd, answer.data(), answer.size(), deadline).is_ok();
        door::make_proof(fuzz::kSecret, g, door::nonce_of(answer), door::Role::client, expected);
        door::make_proof(fuzz::kSecret, g, door::nonce_of(answer), door::Role::server, mine);
        {
          std::lock_guard<std::mutex> lk(mu_);
          client_answer_ok_ = answered && door::same_proof(door::proof_of(answer), expected);
        }
        out = std::string(1, static_cast<char>(door::kAccepted)) +
              std::string(reinterpret_cast<const char*>(mine.data()), mine.size()) + input.substr(g.size());
        (void)write_exact(fd, out.data(), out.size(), deadline);
      } else {
        (void)write_exact(fd, input.data(), input.size(), deadline);
      }
      shutdown(fd, SHUT_WR);
      char sink[4096];
      for (;;) {  // what the client sends, until it closes
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 2000) <= 0 || recv(fd, sink, sizeof sink, 0) <= 0) break;
      }
      ::close(fd);
    }
  }
  int listener_ = -1;
  uint16_t port_ = 0;
  std::mutex mu_;
  std::string input_;
  bool knows_ = false;
  bool client_answer_ok_ = true;
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 1 || size > 4096) return 0;
  static HostileDoor* hostile = new HostileDoor;  // never destroyed: its thread serves to the end
  const bool knows_secret = data[0] & 1;
  const std::string input(reinterpret_cast<const char*>(data + 1), size - 1);
  hostile->set(input, knows_secret);
  // Shorter than pass_door's first pause before another try (50 ms): one try per input.
  const auto start = Clock::now();
  int fd = -1;
  std::unique_ptr<TlsChannel> tls;
  const Status s = pass_door("127.0.0.1", hostile->port(), fuzz::kSecret, start + std::chrono::milliseconds(45), fd, tls);
  FUZZ_CHECK(Clock::now() - start < std::chrono::seconds(2), "pass_door overran its deadline");
  door::Greeting g{};
  if (s.is_ok()) {
    ::close(fd);
    // (An open door proves nothing, and this client has a secret: it is refused.)
    const bool real = knows_secret && greets(input, door::Mode::challenge, g);
    FUZZ_CHECK(real, "passed a door that is none");
    if (knows_secret && greets(input, door::Mode::challenge, g))
      FUZZ_CHECK(hostile->client_answer_ok(), "the client's answer to the challenge was not the right proof");
    return 0;
  }
  FUZZ_CHECK(fd == -1, "a failed pass leaves no socket");
  const Errc c = s.code();
  FUZZ_CHECK(c == Errc::auth_failed || c == Errc::version_mismatch || c == Errc::unreachable || c == Errc::timeout,
             "an undocumented error: " + s.to_string());
  FUZZ_CHECK(!(knows_secret && greets(input, door::Mode::challenge, g)) || c == Errc::timeout,
             "a door that knows the secret was refused: " + s.to_string());
  return 0;
}
