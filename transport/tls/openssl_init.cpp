#include "transport/tls/openssl_init.hpp"

#include <openssl/crypto.h>

namespace chorus {

bool keep_openssl_until_exit() {
  // Only the choice of the exit cleanup: no configuration loaded here, so a program's own later
  // initialisation (OPENSSL_CONF, its settings) still counts.
  static const bool done = OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr) == 1;
  return done;
}

}  // namespace chorus
