#include "transport/door_handshake.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>

#include "transport/tls/openssl_init.hpp"

namespace chorus::door {

// Before main: see keep_openssl_until_exit().
[[maybe_unused]] const bool kDoorHandshakeKeepsOpenssl = chorus::keep_openssl_until_exit();

bool make_greeting(Mode mode, Greeting& out) {
  out.fill(0);
  std::copy(kMagic.begin(), kMagic.end(), out.begin());
  out[kMagic.size()] = static_cast<uint8_t>(mode);
  if (!challenges(mode)) return true;
  return RAND_bytes(out.data() + kMagic.size() + 1, static_cast<int>(kNonceSize)) == 1;
}

bool read_greeting(const Greeting& g, Mode& mode) {
  if (!std::equal(kMagic.begin(), kMagic.end(), g.begin())) return false;
  const uint8_t m = g[kMagic.size()];
  if (m != static_cast<uint8_t>(Mode::open) && m != static_cast<uint8_t>(Mode::challenge) &&
      m != static_cast<uint8_t>(Mode::sealed) && m != static_cast<uint8_t>(Mode::certified) &&
      m != static_cast<uint8_t>(Mode::challenge_certified))
    return false;
  mode = static_cast<Mode>(m);
  return true;
}

bool make_nonce(Nonce& out) { return RAND_bytes(out.data(), static_cast<int>(out.size())) == 1; }

namespace {

// HMAC-SHA256(secret, greeting || client nonce || tag), for a tag of 6 letters.
bool tagged_hmac(const std::string& secret, const Greeting& g, const Nonce& client_nonce, const char (&tag)[7],
                 Proof& out) {
  std::array<uint8_t, kGreetingSize + kNonceSize + sizeof tag - 1> msg{};
  std::copy(g.begin(), g.end(), msg.begin());
  std::copy(client_nonce.begin(), client_nonce.end(), msg.begin() + kGreetingSize);
  std::copy(tag, tag + sizeof tag - 1, msg.begin() + kGreetingSize + kNonceSize);
  // OpenSSL 3 takes an empty key only through a non-null pointer.
  static const uint8_t kNoKey = 0;
  const void* key = secret.empty() ? static_cast<const void*>(&kNoKey) : secret.data();
  unsigned len = 0;
  return HMAC(EVP_sha256(), key, static_cast<int>(secret.size()), msg.data(), msg.size(), out.data(), &len) !=
             nullptr &&
         len == out.size();
}

} // namespace

bool make_proof(const std::string& secret, const Greeting& g, const Nonce& client_nonce, Role role, Proof& out) {
  return role == Role::client ? tagged_hmac(secret, g, client_nonce, "client", out)
                              : tagged_hmac(secret, g, client_nonce, "server", out);
}

bool make_psk(const std::string& secret, const Greeting& g, const Nonce& client_nonce, Proof& out) {
  return tagged_hmac(secret, g, client_nonce, "sealed", out);
}

bool make_answer(const std::string& secret, const Greeting& g, const Nonce& nonce, Answer& out) {
  Proof p{};
  if (!make_proof(secret, g, nonce, Role::client, p)) return false;
  std::copy(nonce.begin(), nonce.end(), out.begin());
  std::copy(p.begin(), p.end(), out.begin() + kNonceSize);
  return true;
}

Nonce nonce_of(const Answer& a) {
  Nonce n{};
  std::copy(a.begin(), a.begin() + kNonceSize, n.begin());
  return n;
}

Proof proof_of(const Answer& a) {
  Proof p{};
  std::copy(a.begin() + kNonceSize, a.end(), p.begin());
  return p;
}

bool same_proof(const Proof& a, const Proof& b) { return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0; }

} // namespace chorus::door
