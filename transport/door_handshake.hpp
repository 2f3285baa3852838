// The bytes of the front door's handshake (transport/front_door.hpp): what the door and a client
// say before any byte reaches CAF's BASP parser.
//
//   door   -> client  greeting: kMagic (8 bytes), mode (1 byte), nonce (32 bytes; RAND_bytes)
//   with mode challenge:
//   client -> door    HMAC-SHA256(secret, greeting || "client")        (32 bytes)
//   door   -> client  kAccepted, HMAC-SHA256(secret, greeting || "server")  (1 + 32 bytes)
//                     or kRejected (1 byte), then the door closes
//   then (either mode) the connection carries CAF's bytes, relayed to the orchestrator.
// The nonce is fresh per connection, so an answer seen on the wire is worth nothing on another;
// the server's proof tells the client it reached a door that knows the secret. Nothing in it
// reveals the secret, so it goes in the clear, ahead of TLS where TLS is used.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace chorus::door {

inline constexpr std::array<uint8_t, 8> kMagic{'c', 'h', 'o', 'r', 'u', 's', 'D', '1'};
inline constexpr std::size_t kNonceSize = 32;
inline constexpr std::size_t kGreetingSize = kMagic.size() + 1 + kNonceSize;
inline constexpr std::size_t kProofSize = 32;  // SHA-256
inline constexpr uint8_t kAccepted = 'Y';
inline constexpr uint8_t kRejected = 'N';

// open: no secret, the door checks nothing (TLS alone, or a trusted network).
enum class Mode : uint8_t { open = 0, challenge = 1 };
enum class Role { client, server };

using Greeting = std::array<uint8_t, kGreetingSize>;
using Proof = std::array<uint8_t, kProofSize>;

// A greeting with a fresh random nonce (zeros in open mode); false when the random generator
// fails (the connection is then closed: a guessable nonce would make answers replayable).
bool make_greeting(Mode mode, Greeting& out);
// The mode a greeting announces; false when it is no door's greeting (bad magic or mode).
bool read_greeting(const Greeting& g, Mode& mode);
// What `role` sends to prove it knows `secret`, bound to this greeting; false when OpenSSL fails
// (never treat `out` as a proof then: two failures must not compare equal).
bool make_proof(const std::string& secret, const Greeting& g, Role role, Proof& out);
// Compared in constant time (CRYPTO_memcmp): timing tells nothing of where they differ.
bool same_proof(const Proof& a, const Proof& b);

} // namespace chorus::door
