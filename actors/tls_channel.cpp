#include "actors/tls_channel.hpp"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "actors/transport.hpp"

namespace chorus {

namespace {

// OpenSSL's reasons for the last failure on this thread ("certificate verify failed; ..."),
// clearing its error queue.
std::string openssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    const char* r = ERR_reason_error_string(e);
    char buf[256];
    if (!r) {
      ERR_error_string_n(e, buf, sizeof buf);
      r = buf;
    }
    if (!out.empty()) out += "; ";
    out += r;
  }
  return out;
}

// Why an SSL call failed: the error queue, the certificate check's verdict, or the kind of error.
std::string failure_text(SSL* ssl, int err) {
  std::string why = openssl_errors();
  const long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK) why += std::string(why.empty() ? "" : ": ") + X509_verify_cert_error_string(verify);
  if (why.empty()) {
    if (err == SSL_ERROR_ZERO_RETURN) why = "the other side closed the TLS session";
    else if (err == SSL_ERROR_SYSCALL) why = "unexpected end of the TLS stream";
    else why = "OpenSSL error " + std::to_string(err);
  }
  return why;
}

int remaining_ms(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms < 0 ? 0 : static_cast<int>(std::min<long long>(ms, 1000));
}

// Some bytes from the socket before the deadline; `got` 0: the other side closed (or reset) it.
Status recv_some(int fd, void* p, std::size_t n, Clock::time_point deadline, std::size_t& got) {
  got = 0;
  for (;;) {
    pollfd pf{fd, POLLIN, 0};
    int rc = poll(&pf, 1, remaining_ms(deadline));
    if (rc < 0 && errno != EINTR) return {Errc::unreachable, std::string("poll: ") + std::strerror(errno)};
    if (rc == 0 && Clock::now() >= deadline) return {Errc::timeout, "timed out"};
    if (rc <= 0) continue;
    ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r < 0 && errno != ECONNRESET) return {Errc::unreachable, std::string("recv: ") + std::strerror(errno)};
    got = r > 0 ? static_cast<std::size_t>(r) : 0;
    return Status::ok();
  }
}

} // namespace

Result<std::shared_ptr<TlsContext>> TlsContext::load(const std::string& certificate, const std::string& key,
                                                     const std::string& ca) {
  std::shared_ptr<TlsContext> c(new TlsContext);
  ERR_clear_error();
  c->ctx_ = SSL_CTX_new(TLS_method());
  if (!c->ctx_) return Status(Errc::internal, "TLS: cannot create a context: " + openssl_errors());
  SSL_CTX* ctx = c->ctx_;
  auto bad = [](const std::string& what) { return Status(Errc::invalid_config, "TLS: " + what + ": " + openssl_errors()); };
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  // Nothing after the handshake but application data: no tickets, no renegotiation.
  SSL_CTX_set_num_tickets(ctx, 0);
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION);
  // AES-128-GCM first: the fastest with AES instructions; the others stay allowed.
  SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256");
  if (SSL_CTX_use_certificate_chain_file(ctx, certificate.c_str()) != 1) return bad("cannot load the certificate " + certificate);
  if (SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1) return bad("cannot load the key " + key);
  if (SSL_CTX_check_private_key(ctx) != 1) return bad("the key " + key + " does not match the certificate " + certificate);
  if (SSL_CTX_load_verify_locations(ctx, ca.c_str(), nullptr) != 1) return bad("cannot load the CA " + ca);
  // Mutual authentication: each side must present a certificate signed by the CA.
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  return c;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

TlsChannel::~TlsChannel() { SSL_free(ssl_); }  // frees the BIOs too

Result<std::unique_ptr<TlsChannel>> TlsChannel::handshake(const TlsContext& ctx, int fd, bool server,
                                                          Clock::time_point deadline) {
  std::unique_ptr<TlsChannel> ch(new TlsChannel);
  ERR_clear_error();
  ch->ssl_ = SSL_new(ctx.native());
  ch->rbio_ = BIO_new(BIO_s_mem());
  ch->wbio_ = BIO_new(BIO_s_mem());
  if (!ch->ssl_ || !ch->rbio_ || !ch->wbio_) {
    BIO_free(ch->rbio_);  // not yet owned by the SSL object
    BIO_free(ch->wbio_);
    return Status(Errc::internal, "TLS: cannot create a session: " + openssl_errors());
  }
  SSL* ssl = ch->ssl_;
  SSL_set_bio(ssl, ch->rbio_, ch->wbio_);
  if (server) SSL_set_accept_state(ssl);
  else SSL_set_connect_state(ssl);
  std::vector<char> in(16 << 10);
  for (;;) {
    ERR_clear_error();
    const int rc = SSL_do_handshake(ssl);
    const int err = rc == 1 ? SSL_ERROR_NONE : SSL_get_error(ssl, rc);
    const bool going = err == SSL_ERROR_NONE || err == SSL_ERROR_WANT_READ;
    const std::string why = going ? std::string() : failure_text(ssl, err);
    // What the handshake produced goes out first: our next flight, or on failure the alert that
    // tells the other side why we hang up (best effort, briefly).
    if (BIO_ctrl_pending(ch->wbio_) > 0) {
      char* data = nullptr;
      const long len = BIO_get_mem_data(ch->wbio_, &data);
      const auto until = going ? deadline : std::min(deadline, Clock::now() + std::chrono::milliseconds(500));
      Status s = write_exact(fd, data, static_cast<std::size_t>(len), until);
      (void)BIO_reset(ch->wbio_);
      if (!s && going)
        return Status(s.code() == Errc::timeout ? Errc::timeout : Errc::auth_failed, "TLS handshake: " + s.message());
    }
    if (err == SSL_ERROR_NONE) break;
    if (!going) return Status(Errc::auth_failed, "TLS handshake failed: " + why);
    std::size_t got = 0;
    Status s = recv_some(fd, in.data(), in.size(), deadline, got);
    if (!s) return Status(s.code(), "TLS handshake: " + s.message());
    if (got == 0)
      return Status(Errc::auth_failed,
                    "TLS handshake failed: the other side closed the connection (no TLS there, or it refused our certificate)");
    BIO_write(ch->rbio_, in.data(), static_cast<int>(got));
  }
  // SSL_VERIFY_PEER already failed the handshake otherwise; checked again so that no setting can
  // let an unauthenticated peer through.
  if (SSL_get_verify_result(ssl) != X509_V_OK || SSL_get0_peer_certificate(ssl) == nullptr)
    return Status(Errc::auth_failed, "TLS handshake: the other side presented no valid certificate");
  return ch;
}

bool TlsChannel::encrypt(const void* p, std::size_t n, std::string& out, std::string& why) {
  if (n == 0) return true;  // SSL_write refuses empty writes; there is nothing to send
  std::lock_guard<std::mutex> lk(mu_);
  ERR_clear_error();
  std::size_t written = 0;
  if (SSL_write_ex(ssl_, p, n, &written) != 1 || written != n) {
    why = failure_text(ssl_, SSL_get_error(ssl_, 0));
    return false;
  }
  char* data = nullptr;
  const long len = BIO_get_mem_data(wbio_, &data);
  out.append(data, static_cast<std::size_t>(len));
  (void)BIO_reset(wbio_);
  return true;
}

void TlsChannel::feed(const void* p, std::size_t n) {
  std::lock_guard<std::mutex> lk(mu_);
  BIO_write(rbio_, p, static_cast<int>(n));  // a memory BIO takes everything
}

long TlsChannel::decrypt(void* p, std::size_t n, std::string& why) {
  std::lock_guard<std::mutex> lk(mu_);
  std::size_t total = 0;
  while (total < n) {
    ERR_clear_error();
    std::size_t got = 0;
    if (SSL_read_ex(ssl_, static_cast<char*>(p) + total, n - total, &got) == 1) {
      total += got;
      continue;
    }
    const int err = SSL_get_error(ssl_, 0);
    if (err == SSL_ERROR_WANT_READ) break;  // the rest of the record is still on the wire
    why = failure_text(ssl_, err);
    return -1;
  }
  return static_cast<long>(total);
}

Status TlsChannel::write_all(int fd, const void* p, std::size_t n, Clock::time_point deadline) {
  std::string out, why;
  if (!encrypt(p, n, out, why)) return {Errc::internal, "TLS: " + why};
  return write_exact(fd, out.data(), out.size(), deadline);
}

Status TlsChannel::read_exact(int fd, void* p, std::size_t n, Clock::time_point deadline) {
  std::vector<char> in(16 << 10);
  std::size_t done = 0;
  while (done < n) {
    std::string why;
    const long got = decrypt(static_cast<char*>(p) + done, n - done, why);
    if (got < 0) return {Errc::auth_failed, "TLS: " + why};
    if (got > 0) {
      done += static_cast<std::size_t>(got);
      continue;
    }
    std::size_t r = 0;
    if (auto s = recv_some(fd, in.data(), in.size(), deadline, r); !s) return s;
    if (r == 0) return {Errc::unreachable, "the connection was closed"};
    feed(in.data(), r);
  }
  return Status::ok();
}

} // namespace chorus
