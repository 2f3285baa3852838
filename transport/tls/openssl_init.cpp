#include "transport/tls/openssl_init.hpp"

#include <openssl/crypto.h>
#include <openssl/ssl.h>

namespace chorus {

bool keep_openssl_until_exit() {
  static const bool done = OPENSSL_init_ssl(OPENSSL_INIT_NO_ATEXIT, nullptr) == 1;
  return done;
}

}  // namespace chorus
