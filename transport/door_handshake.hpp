// The bytes of the front door's handshake (transport/front_door.hpp): what the door and a client
// say before any byte reaches CAF's BASP parser.
//
//   door   -> client  greeting: kMagic (8 bytes), mode (1 byte), nonce (32 bytes; RAND_bytes)
//   with mode challenge:
//   client -> door    answer: its own nonce (32 bytes; RAND_bytes),
//                     HMAC-SHA256(secret, greeting || client nonce || "client")   (32 bytes)
//   door   -> client  kAccepted, HMAC-SHA256(secret, greeting || client nonce || "server")
//                     (1 + 32 bytes), or kRejected (1 byte), then the door closes
//   with mode sealed: the same, then a TLS 1.3 handshake (the client connects, the door accepts)
//                     keyed by an external PSK: HMAC-SHA256(secret, greeting || client nonce ||
//                     "sealed"), fresh per connection like the nonces, so no certificates are
//                     needed and a capture shows nothing of what follows.
//   with mode certified (or challenge_certified: the challenge first): a TLS 1.3 handshake with
//                     certificates, each side's signed by the CA the other holds.
//   then (every mode) the connection carries CAF's bytes, relayed to the orchestrator (inside the
//   TLS session of a sealed or certified link).
// Both ends' nonces are fresh per connection, so nothing seen on the wire is worth anything on
// another: a client's answer does not open the door again, and a door's proof does not convince
// another client (an impostor that replays a real door's greeting and proof is refused, since the
// client's nonce differs). The server's proof tells the client it reached a door that knows the
// secret. Nothing in it reveals the secret, so it goes in the clear, ahead of TLS where TLS is used.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace chorus::door {

inline constexpr std::array<uint8_t, 8> kMagic{'c', 'h', 'o', 'r', 'u', 's', 'D', '2'};
inline constexpr std::size_t kNonceSize = 32;
inline constexpr std::size_t kGreetingSize = kMagic.size() + 1 + kNonceSize;
inline constexpr std::size_t kProofSize = 32;  // SHA-256
inline constexpr std::size_t kAnswerSize = kNonceSize + kProofSize;
inline constexpr uint8_t kAccepted = 'Y';
inline constexpr uint8_t kRejected = 'N';

// open: no secret, the door checks nothing (a trusted network). challenge: the secret is proven,
// then CAF's bytes follow in the clear. sealed: the secret is proven, then the link is TLS keyed
// by it (make_psk). certified: TLS with certificates, no secret; challenge_certified: both.
enum class Mode : uint8_t { open = 0, challenge = 1, sealed = 2, certified = 4, challenge_certified = 5 };
// Whether a door in `mode` challenges its clients for the secret.
inline bool challenges(Mode m) { return m == Mode::challenge || m == Mode::sealed || m == Mode::challenge_certified; }
// Whether the link is TLS with certificates after the door's handshake.
inline bool certified(Mode m) { return m == Mode::certified || m == Mode::challenge_certified; }
enum class Role { client, server };

using Greeting = std::array<uint8_t, kGreetingSize>;
using Nonce = std::array<uint8_t, kNonceSize>;
using Proof = std::array<uint8_t, kProofSize>;
using Answer = std::array<uint8_t, kAnswerSize>;  // the client's nonce, then its proof

// A greeting with a fresh random nonce (zeros in open mode); false when the random generator
// fails (the connection is then closed: a guessable nonce would make answers replayable).
bool make_greeting(Mode mode, Greeting& out);
// The mode a greeting announces; false when it is no door's greeting (bad magic or mode).
bool read_greeting(const Greeting& g, Mode& mode);
// A fresh random nonce; false when the generator fails.
bool make_nonce(Nonce& out);
// What `role` sends to prove it knows `secret`, bound to this greeting and the client's nonce;
// false when OpenSSL fails (never treat `out` as a proof then: two failures must not compare equal).
bool make_proof(const std::string& secret, const Greeting& g, const Nonce& client_nonce, Role role, Proof& out);
// The key of a sealed link's TLS session, bound to this greeting and the client's nonce: known
// only to the two ends of this connection; false when OpenSSL fails.
bool make_psk(const std::string& secret, const Greeting& g, const Nonce& client_nonce, Proof& out);
// The client's answer: `nonce`, then its proof; false when OpenSSL fails.
bool make_answer(const std::string& secret, const Greeting& g, const Nonce& nonce, Answer& out);
// The nonce and the proof of an answer.
Nonce nonce_of(const Answer& a);
Proof proof_of(const Answer& a);
// Compared in constant time (CRYPTO_memcmp): timing tells nothing of where they differ.
bool same_proof(const Proof& a, const Proof& b);

} // namespace chorus::door
