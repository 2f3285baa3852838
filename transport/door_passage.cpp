#include "transport/door_passage.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "transport/door_handshake.hpp"
#include "transport/own_connection.hpp"
#include "transport/relay.hpp"
#include "transport/socket.hpp"

namespace chorus {

namespace {

// The relay of every passage of the process. Never destroyed: the connections it carries belong
// to actor systems that may outlive any static object's destruction order.
Relay& passage_relay() {
  static Relay* relay = new Relay;
  return *relay;
}

struct CloseOnError {
  int& fd;
  bool keep = false;
  ~CloseOnError() {
    if (!keep && fd >= 0) ::close(fd);
    if (!keep) fd = -1;
  }
};

// One try. `closed` says the door hung up before its verdict: worth another try.
Status knock_once(const std::string& host, uint16_t port, const std::string& secret, const TlsContext* certified,
                  Clock::time_point deadline, int& fd, std::unique_ptr<TlsChannel>& tls, bool& closed) {
  closed = false;
  tls.reset();
  if (auto s = tcp_connect(host, port, deadline, fd); !s) return s;
  CloseOnError guard{fd};
  door::Greeting greeting{};
  if (auto s = read_exact(fd, greeting.data(), greeting.size(), deadline); !s) {
    closed = s.code() == Errc::unreachable;
    return s;
  }
  door::Mode mode{};
  if (!door::read_greeting(greeting, mode))
    return {Errc::version_mismatch,
            "it does not greet as a chorus front door (an older orchestrator, or no orchestrator)"};
  // A door that asks for no secret, and has no certificate to show, proves nothing: with a secret
  // of ours, it is not the orchestrator we were given it for (an impostor would greet so).
  if (!secret.empty() && !door::challenges(mode) && !door::certified(mode))
    return {Errc::auth_failed,
            "it asks for no secret and this process has one: not the orchestrator the secret is for (or one started without it)"};
  // No fallback either way: certificates on one side only is a mistake to report, not to paper over.
  if (door::certified(mode) && !certified)
    return {Errc::auth_failed, "the orchestrator uses TLS with certificates, and this process has no TLS files"};
  if (!door::certified(mode) && certified)
    return {Errc::auth_failed, "this process has TLS files, and the orchestrator does not use TLS with certificates"};
  if (door::challenges(mode)) {
    door::Nonce mine{};
    door::Answer answer{};
    door::Proof expected{}, theirs{};
    if (!door::make_nonce(mine)) return {Errc::internal, "OpenSSL's random generator does not work"};
    if (!door::make_answer(secret, greeting, mine, answer) ||
        !door::make_proof(secret, greeting, mine, door::Role::server, expected))
      return {Errc::internal, "OpenSSL could not compute the handshake's HMAC"};
    if (auto s = write_exact(fd, answer.data(), answer.size(), deadline); !s) {
      closed = s.code() == Errc::unreachable;
      return s;
    }
    uint8_t verdict = 0;
    if (auto s = read_exact(fd, &verdict, 1, deadline); !s) {
      closed = s.code() == Errc::unreachable;
      return s;
    }
    if (verdict == door::kRejected) return {Errc::auth_failed, "wrong secret"};
    if (verdict != door::kAccepted) return {Errc::version_mismatch, "its front door answered the handshake garbled"};
    if (auto s = read_exact(fd, theirs.data(), theirs.size(), deadline); !s) return s;
    if (!door::same_proof(theirs, expected))
      return {Errc::auth_failed, "its front door does not know the secret (a wrong proof): not the orchestrator"};
    if (mode == door::Mode::sealed) {
      door::Proof key{};
      if (!door::make_psk(secret, greeting, mine, key)) return {Errc::internal, "OpenSSL could not derive the link's key"};
      auto ctx = TlsContext::psk();
      if (!ctx) return ctx.status();
      auto ch = TlsChannel::handshake(**ctx, fd, false, deadline, std::string(key.begin(), key.end()));
      if (!ch) return {ch.status().code(), "sealing the link to the orchestrator: " + ch.status().message()};
      tls = std::move(*ch);
    }
  }
  if (door::certified(mode)) {
    auto ch = TlsChannel::handshake(*certified, fd, false, deadline);
    if (!ch) return {ch.status().code(), "TLS to the orchestrator: " + ch.status().message()};
    tls = std::move(*ch);
  }
  guard.keep = true;
  return Status::ok();
}

} // namespace

Status pass_door(const std::string& host, uint16_t port, const std::string& secret, Clock::time_point deadline,
                 int& fd, std::unique_ptr<TlsChannel>& tls, const TlsContext* certified) {
  for (auto pause = std::chrono::milliseconds(50);; pause = std::min(pause * 2, std::chrono::milliseconds(400))) {
    bool closed = false;
    Status s = knock_once(host, port, secret, certified, deadline, fd, tls, closed);
    if (s || !closed || Clock::now() + pause >= deadline) return s;
    std::this_thread::sleep_for(pause);
  }
}

namespace {
std::atomic<uint64_t> passages_opened{0};
} // namespace

uint64_t DoorPassage::opened() { return passages_opened.load(std::memory_order_relaxed); }

Result<DoorPassage> DoorPassage::open(const std::string& host, uint16_t port, const std::string& secret,
                                      Clock::time_point deadline, std::chrono::milliseconds silence,
                                      const TlsContext* certified) {
  int door_fd = -1;
  std::unique_ptr<TlsChannel> tls;
  if (auto s = pass_door(host, port, secret, deadline, door_fd, tls, certified); !s) return s;
  int listener = -1;
  DoorPassage p;
  if (auto s = tcp_listen("127.0.0.1", 0, listener, p.port_); !s) {
    ::close(door_fd);
    return s;
  }
  p.token_ = passage_relay().add_after_accept(listener, door_fd, opened_by_this_process, silence, std::move(tls));
  passages_opened.fetch_add(1, std::memory_order_relaxed);
  return p;
}

DoorPassage::DoorPassage(DoorPassage&& o) noexcept : port_(o.port_), token_(o.token_) { o.token_ = 0; }

DoorPassage& DoorPassage::operator=(DoorPassage&& o) noexcept {
  if (this != &o) {
    if (token_) passage_relay().cancel(token_);
    port_ = o.port_;
    token_ = o.token_;
    o.token_ = 0;
  }
  return *this;
}

DoorPassage::~DoorPassage() {
  if (token_) passage_relay().cancel(token_);
}

} // namespace chorus
