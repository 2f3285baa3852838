#include "transport/tls/tls_channel.hpp"

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

#include "transport/socket.hpp"

#include "transport/tls/openssl_init.hpp"

namespace chorus {

// Before main: see keep_openssl_until_exit().
[[maybe_unused]] const bool kTlsChannelKeepsOpenssl = chorus::keep_openssl_until_exit();

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

// Some bytes from the socket before the deadline; `got` 0: the other side closed (or reset) it.
Status recv_some(int fd, void* p, std::size_t n, Clock::time_point deadline, std::size_t& got) {
  got = 0;
  for (;;) {
    pollfd pf{fd, POLLIN, 0};
    int rc = poll(&pf, 1, poll_ms_until(deadline));
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

// The channel's BIO: writes append to the channel's current output string, reads take what the
// socket delivered into the channel's input buffer; nothing is there: retry (OpenSSL then asks
// for more with SSL_ERROR_WANT_READ).
struct TlsBio {
  static TlsChannel& of(BIO* b) { return *static_cast<TlsChannel*>(BIO_get_data(b)); }
  static const std::string& psk_of(const TlsChannel& c) { return c.psk_; }
  static int write(BIO* b, const char* p, std::size_t n, std::size_t* written) {
    TlsChannel& c = of(b);
    (c.out_ ? *c.out_ : c.stray_).append(p, n);
    *written = n;
    return 1;
  }
  static int read(BIO* b, char* p, std::size_t n, std::size_t* got) {
    TlsChannel& c = of(b);
    BIO_clear_retry_flags(b);
    const std::size_t k = std::min(n, c.in_end_ - c.in_pos_);
    *got = k;
    if (k == 0) {
      BIO_set_retry_read(b);
      return 0;
    }
    std::memcpy(p, c.in_.data() + c.in_pos_, k);
    c.in_pos_ += k;
    return 1;
  }
  static long ctrl(BIO* b, int cmd, long, void*) {
    if (cmd == BIO_CTRL_FLUSH) return 1;
    if (cmd == BIO_CTRL_PENDING) return static_cast<long>(of(b).in_end_ - of(b).in_pos_);
    return 0;
  }
  static int create(BIO* b) {
    BIO_set_init(b, 1);
    return 1;
  }
  static const BIO_METHOD* method() {
    static BIO_METHOD* m = [] {
      BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "chorus data connection");
      if (m) {
        BIO_meth_set_write_ex(m, write);
        BIO_meth_set_read_ex(m, read);
        BIO_meth_set_ctrl(m, ctrl);
        BIO_meth_set_create(m, create);
      }
      return m;
    }();
    return m;
  }
};

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

namespace {

constexpr unsigned char kPskIdentity[] = "chorus";
constexpr std::size_t kPskIdentitySize = sizeof kPskIdentity - 1;

// A session that carries the channel's key as TLS 1.3's external PSK (AES-128-GCM, SHA-256).
SSL_SESSION* psk_session(SSL* ssl) {
  const auto* ch = static_cast<const TlsChannel*>(SSL_get_app_data(ssl));
  static const unsigned char kAes128GcmSha256[] = {0x13, 0x01};
  const SSL_CIPHER* cipher = SSL_CIPHER_find(ssl, kAes128GcmSha256);
  SSL_SESSION* s = cipher && ch ? SSL_SESSION_new() : nullptr;
  if (!s) return nullptr;
  const std::string& key = TlsBio::psk_of(*ch);
  if (SSL_SESSION_set1_master_key(s, reinterpret_cast<const unsigned char*>(key.data()), key.size()) != 1 ||
      SSL_SESSION_set_cipher(s, cipher) != 1 || SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION) != 1) {
    SSL_SESSION_free(s);
    return nullptr;
  }
  return s;
}

int use_psk(SSL* ssl, const EVP_MD* md, const unsigned char** id, std::size_t* idlen, SSL_SESSION** sess) {
  SSL_SESSION* s = psk_session(ssl);
  if (!s) return 0;
  // After a HelloRetryRequest the digest is fixed: a key for another one cannot be offered.
  if (md && SSL_CIPHER_get_handshake_digest(SSL_SESSION_get0_cipher(s)) != md) {
    SSL_SESSION_free(s);
    *sess = nullptr;
    return 1;
  }
  *id = kPskIdentity;
  *idlen = kPskIdentitySize;
  *sess = s;
  return 1;
}

int find_psk(SSL* ssl, const unsigned char* id, std::size_t idlen, SSL_SESSION** sess) {
  *sess = nullptr;  // an unknown identity: no key, the handshake then fails
  if (idlen != kPskIdentitySize || std::memcmp(id, kPskIdentity, idlen) != 0) return 1;
  *sess = psk_session(ssl);
  return *sess ? 1 : 0;
}

} // namespace

Result<std::shared_ptr<TlsContext>> TlsContext::psk() {
  static std::mutex mu;
  static std::shared_ptr<TlsContext> made;
  std::lock_guard<std::mutex> lk(mu);
  if (made) return made;
  std::shared_ptr<TlsContext> c(new TlsContext);
  ERR_clear_error();
  c->ctx_ = SSL_CTX_new(TLS_method());
  if (!c->ctx_) return Status(Errc::internal, "TLS: cannot create a context: " + openssl_errors());
  c->psk_ = true;
  SSL_CTX* ctx = c->ctx_;
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_num_tickets(ctx, 0);
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256");
  SSL_CTX_set_psk_use_session_callback(ctx, use_psk);
  SSL_CTX_set_psk_find_session_callback(ctx, find_psk);
  made = c;
  return c;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

TlsChannel::~TlsChannel() { SSL_free(ssl_); }  // frees the BIO too

Result<std::unique_ptr<TlsChannel>> TlsChannel::begin(const TlsContext& ctx, bool server, const std::string& psk) {
  std::unique_ptr<TlsChannel> ch(new TlsChannel);
  ERR_clear_error();
  if (ctx.uses_psk() && psk.size() != kPskSize)
    return Status(Errc::internal, "TLS: a pre-shared key of " + std::to_string(kPskSize) + " bytes is needed");
  ch->psk_mode_ = ctx.uses_psk();
  ch->psk_ = psk;
  ch->ssl_ = SSL_new(ctx.native());
  const BIO_METHOD* method = TlsBio::method();
  BIO* bio = ch->ssl_ && method ? BIO_new(method) : nullptr;
  if (!bio) return Status(Errc::internal, "TLS: cannot create a session: " + openssl_errors());
  BIO_set_data(bio, ch.get());
  SSL* ssl = ch->ssl_;
  SSL_set_app_data(ssl, ch.get());  // the PSK callbacks find the key there
  SSL_set_bio(ssl, bio, bio);  // one BIO both ways: the SSL object owns its one reference
  if (server) SSL_set_accept_state(ssl);
  else SSL_set_connect_state(ssl);
  return ch;
}

Status TlsChannel::step(std::string& flight, bool& done) {
  std::lock_guard<std::mutex> lk(mu_);
  done = false;
  ERR_clear_error();
  out_ = &flight;
  const int rc = SSL_do_handshake(ssl_);
  out_ = nullptr;
  const int err = rc == 1 ? SSL_ERROR_NONE : SSL_get_error(ssl_, rc);
  if (err == SSL_ERROR_WANT_READ) return Status::ok();
  if (err != SSL_ERROR_NONE) return {Errc::auth_failed, "TLS handshake failed: " + failure_text(ssl_, err)};
  // The handshake's own checks already failed it otherwise; checked again so that no setting can
  // let an unauthenticated peer through.
  if (psk_mode_ ? SSL_session_reused(ssl_) != 1
                : SSL_get_verify_result(ssl_) != X509_V_OK || SSL_get0_peer_certificate(ssl_) == nullptr)
    return {Errc::auth_failed, psk_mode_ ? "TLS handshake: the other side did not use the pre-shared key"
                                         : "TLS handshake: the other side presented no valid certificate"};
  established_ = done = true;
  return Status::ok();
}

Result<std::unique_ptr<TlsChannel>> TlsChannel::handshake(const TlsContext& ctx, int fd, bool server,
                                                          Clock::time_point deadline, const std::string& psk) {
  auto begun = begin(ctx, server, psk);
  if (!begun) return begun.status();
  std::unique_ptr<TlsChannel> ch = std::move(*begun);
  for (;;) {
    std::string flight;
    bool done = false;
    const Status st = ch->step(flight, done);
    // What the handshake produced goes out first: our next flight, or on failure the alert that
    // tells the other side why we hang up (best effort, briefly).
    if (!flight.empty()) {
      const auto until = st ? deadline : std::min(deadline, Clock::now() + std::chrono::milliseconds(500));
      Status s = write_exact(fd, flight.data(), flight.size(), until);
      if (!s.is_ok() && st)
        return Status(s.code() == Errc::timeout ? Errc::timeout : Errc::auth_failed, "TLS handshake: " + s.message());
    }
    if (!st) return st;
    if (done) return ch;
    std::size_t room = 0, got = 0;
    char* at = ch->input(room);
    Status s = recv_some(fd, at, room, deadline, got);
    if (!s.is_ok()) return Status(s.code(), "TLS handshake: " + s.message());
    if (got == 0)
      return Status(Errc::auth_failed, ch->psk_mode_
                                           ? "TLS handshake failed: the other side closed the connection (no TLS there, or another key)"
                                           : "TLS handshake failed: the other side closed the connection (no TLS there, or it refused our certificate)");
    ch->received(got);
  }
}

bool TlsChannel::encrypt(const void* p, std::size_t n, std::string& out, std::string& why) {
  if (n == 0) return true;  // SSL_write refuses empty writes; there is nothing to send
  std::lock_guard<std::mutex> lk(mu_);
  if (!stray_.empty()) {
    out += stray_;
    stray_.clear();
  }
  ERR_clear_error();
  std::size_t written = 0;
  out_ = &out;
  const bool ok = SSL_write_ex(ssl_, p, n, &written) == 1 && written == n;
  out_ = nullptr;
  if (!ok) why = failure_text(ssl_, SSL_get_error(ssl_, 0));
  return ok;
}

char* TlsChannel::input(std::size_t& room) {
  constexpr std::size_t kIn = std::size_t{64} << 10;
  std::lock_guard<std::mutex> lk(mu_);
  if (in_.size() != kIn) in_.resize(kIn);
  if (in_pos_ > 0) {  // OpenSSL takes what it needs as it goes: usually nothing is left
    std::memmove(in_.data(), in_.data() + in_pos_, in_end_ - in_pos_);
    in_end_ -= in_pos_;
    in_pos_ = 0;
  }
  room = kIn - in_end_;
  return in_.data() + in_end_;
}

bool TlsChannel::buffered() {
  std::lock_guard<std::mutex> lk(mu_);
  return in_end_ > in_pos_ || SSL_pending(ssl_) > 0;
}

void TlsChannel::received(std::size_t n) {
  std::lock_guard<std::mutex> lk(mu_);
  in_end_ += n;
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
    if (total > 0) break;  // what came before the failure is good: the failure shows at the next call
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
  std::size_t done = 0;
  while (done < n) {
    std::string why;
    const long got = decrypt(static_cast<char*>(p) + done, n - done, why);
    if (got < 0) return {Errc::auth_failed, "TLS: " + why};
    if (got > 0) {
      done += static_cast<std::size_t>(got);
      continue;
    }
    std::size_t room = 0, r = 0;
    char* at = input(room);
    if (auto s = recv_some(fd, at, room, deadline, r); !s.is_ok()) return s;
    if (r == 0) return {Errc::unreachable, "the connection was closed"};
    received(r);
  }
  return Status::ok();
}

Status TlsChannel::write_all(int fd, TlsChannel* tls, const void* p, std::size_t n, Clock::time_point deadline) {
  return tls ? tls->write_all(fd, p, n, deadline) : write_exact(fd, p, n, deadline);
}

Status TlsChannel::read_exact(int fd, TlsChannel* tls, void* p, std::size_t n, Clock::time_point deadline) {
  return tls ? tls->read_exact(fd, p, n, deadline) : chorus::read_exact(fd, p, n, deadline);
}

} // namespace chorus
