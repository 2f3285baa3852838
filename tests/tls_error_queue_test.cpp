// CAF's TLS calls go through chorus's wrappers (actors/openssl_error_queue.cpp), which clear
// OpenSSL's error queue first: an error one failed connection left in a thread's queue must not
// make the next connection of that thread, healthy but waiting for data, read as broken.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <string>

#include "actors/remoting.hpp"

namespace chorus {
namespace {

// A client and a server TLS session joined by an in-memory pipe, handshake done; nothing more
// is ever sent, so a read on either waits.
struct EstablishedPair {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* cert = X509_new();
  SSL_CTX* server_ctx = SSL_CTX_new(TLS_server_method());
  SSL_CTX* client_ctx = SSL_CTX_new(TLS_client_method());
  SSL* server = nullptr;
  SSL* client = nullptr;
  bool established = false;
  EstablishedPair() {
    ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
    X509_gmtime_adj(X509_getm_notBefore(cert), 0);
    X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
    X509_set_pubkey(cert, key);
    X509_NAME_add_entry_by_txt(X509_get_subject_name(cert), "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>("chorus-test"), -1, -1, 0);
    X509_set_issuer_name(cert, X509_get_subject_name(cert));
    X509_sign(cert, key, EVP_sha256());
    SSL_CTX_use_certificate(server_ctx, cert);
    SSL_CTX_use_PrivateKey(server_ctx, key);
    server = SSL_new(server_ctx);
    client = SSL_new(client_ctx);
    BIO *a = nullptr, *b = nullptr;
    BIO_new_bio_pair(&a, 0, &b, 0);
    SSL_set_bio(client, a, a);
    SSL_set_bio(server, b, b);
    SSL_set_connect_state(client);
    SSL_set_accept_state(server);
    for (int round = 0; round < 10 && !established; ++round) {
      const int c = SSL_do_handshake(client), s = SSL_do_handshake(server);
      established = c == 1 && s == 1;
    }
    // The client takes in the server's session tickets (TLS 1.3 sends them after the handshake).
    char none[1];
    established = established && SSL_read(client, none, 1) == -1 && SSL_get_error(client, -1) == SSL_ERROR_WANT_READ;
    ERR_clear_error();
  }
  ~EstablishedPair() {
    SSL_free(client);
    SSL_free(server);
    SSL_CTX_free(client_ctx);
    SSL_CTX_free(server_ctx);
    X509_free(cert);
    EVP_PKEY_free(key);
  }
};

// The error a connection cut off mid-record leaves in the thread's queue.
void leave_a_stale_error() { ERR_raise(ERR_LIB_SSL, SSL_R_UNEXPECTED_EOF_WHILE_READING); }

TEST(TlsErrorQueue, CafsCallsGoThroughTheWrappers) { EXPECT_TRUE(tls_calls_clear_error_queue()); }

TEST(TlsErrorQueue, AStaleErrorDoesNotBreakAConnectionThatWaits) {
  EstablishedPair p;
  ASSERT_TRUE(p.established);
  char buf[16];
  for (SSL* side : {p.client, p.server}) {
    leave_a_stale_error();
    const int rc = SSL_read(side, buf, sizeof buf);
    EXPECT_EQ(rc, -1);
    EXPECT_EQ(SSL_get_error(side, rc), SSL_ERROR_WANT_READ) << (side == p.client ? "client" : "server");
  }
  // And data still flows: what the client writes after another stale error, the server reads.
  leave_a_stale_error();
  ASSERT_EQ(SSL_write(p.client, "ping", 4), 4);
  leave_a_stale_error();
  ASSERT_EQ(SSL_read(p.server, buf, sizeof buf), 4);
  EXPECT_EQ(std::string(buf, 4), "ping");
}

// What CAF saw before: libssl's own SSL_read leaves the queue as it is, and the same waiting
// connection reads as failed (CAF then closes it).
TEST(TlsErrorQueue, WithoutTheWrapperTheSameConnectionReadsAsFailed) {
  auto libssl_read = reinterpret_cast<int (*)(SSL*, void*, int)>(dlsym(RTLD_NEXT, "SSL_read"));
  ASSERT_NE(libssl_read, nullptr);
  EstablishedPair p;
  ASSERT_TRUE(p.established);
  char buf[16];
  leave_a_stale_error();
  const int rc = libssl_read(p.client, buf, sizeof buf);
  EXPECT_EQ(rc, -1);
  EXPECT_EQ(SSL_get_error(p.client, rc), SSL_ERROR_SSL);
  ERR_clear_error();
}

} // namespace
} // namespace chorus
