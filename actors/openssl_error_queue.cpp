// CAF 0.17's TLS sessions (libcaf_openssl) call SSL_read, SSL_write, SSL_connect and SSL_accept
// without first clearing the thread's OpenSSL error queue, and with CAF's logging compiled out
// (Debian's build) never drain it after a failure. SSL_get_error reads that queue: one failed
// connection (a peer killed mid-record, a stranger's certificate, a handshake cut short) leaves an
// error behind, and the next call of the same thread on a healthy connection that merely has no
// data yet reads as broken, so CAF closes it. The orchestrator's multiplexer thread serves every
// node, so it dropped them all at once.
//
// Defined in the executable that links chorus, these four come before libssl's for
// libcaf_openssl (the linker exports them because a shared library it links refers to them).
// Each clears the queue, as OpenSSL asks of every caller, then calls libssl's own. chorus's own
// TLS channel (transport/tls) clears the queue itself and uses the _ex calls.
#include <dlfcn.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "actors/remoting.hpp"

namespace {
template <class Fn>
Fn next_definition(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}
} // namespace

extern "C" {

int SSL_read(SSL* ssl, void* buf, int num) {
  static const auto real = next_definition<int (*)(SSL*, void*, int)>("SSL_read");
  ERR_clear_error();
  return real(ssl, buf, num);
}

int SSL_write(SSL* ssl, const void* buf, int num) {
  static const auto real = next_definition<int (*)(SSL*, const void*, int)>("SSL_write");
  ERR_clear_error();
  return real(ssl, buf, num);
}

int SSL_connect(SSL* ssl) {
  static const auto real = next_definition<int (*)(SSL*)>("SSL_connect");
  ERR_clear_error();
  return real(ssl);
}

int SSL_accept(SSL* ssl) {
  static const auto real = next_definition<int (*)(SSL*)>("SSL_accept");
  ERR_clear_error();
  return real(ssl);
}

} // extern "C"

namespace chorus {

bool tls_calls_clear_error_queue() {
  return dlsym(RTLD_DEFAULT, "SSL_read") == reinterpret_cast<void*>(&SSL_read) &&
         dlsym(RTLD_DEFAULT, "SSL_accept") == reinterpret_cast<void*>(&SSL_accept);
}

} // namespace chorus
