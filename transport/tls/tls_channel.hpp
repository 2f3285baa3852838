// TLS for the data connections between nodes (OpenSSL 3, in user space: this kernel has no kTLS).
// A TlsChannel wraps one SSL object whose BIO is memory the channel owns, so OpenSSL never touches
// the socket: the connection's own threads move ciphertext in and out with their socket calls,
// outside the channel's lock, and only the encryption and decryption are serialised. That lock is
// needed because an SSL object must not be used by two threads at once, and a connection decrypts
// on its reader thread while its writer (or an inline sender) encrypts.
// The BIO is a small one of our own rather than BIO_s_mem: records go straight into the caller's
// string and come straight from the buffer the socket was read into, where a memory BIO copies
// (and clears) every byte once more in each direction (measured on loopback, 32 MiB one way
// through two Connections: about 28.5 ms with BIO_s_mem, 26 ms with this one, ~12% less CPU).
// Both sides present a certificate and verify the other's against the CA (TLS 1.3 only), or, in
// a context made by TlsContext::psk(), both hold the same external pre-shared key (RFC 8446's
// external PSK with (EC)DHE: authenticated by the key, forward secret by the key exchange). No
// session tickets, renegotiation or key updates: after the handshake every record is application
// data, so the reader never has to write and the writer never has to read.
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include <chorus/result.hpp>
#include <chorus/status.hpp>
#include "core/wait.hpp"

struct ssl_ctx_st;
struct ssl_st;
struct bio_st;

namespace chorus {

// This node's certificate and key and the CA that must have signed the other nodes' certificates.
class TlsContext {
 public:
  // invalid_config naming the file and OpenSSL's reason when one cannot be loaded.
  static Result<std::shared_ptr<TlsContext>> load(const std::string& certificate, const std::string& key,
                                                  const std::string& ca);
  // A context whose channels authenticate by a 32-byte key both ends were given (handshake()'s
  // `psk`), without certificates: the front door's sealed link, keyed by the secret. One for the
  // process.
  static Result<std::shared_ptr<TlsContext>> psk();
  ~TlsContext();
  bool uses_psk() const { return psk_; }
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;
  ssl_ctx_st* native() const { return ctx_; }

 private:
  TlsContext() = default;
  ssl_ctx_st* ctx_ = nullptr;
  bool psk_ = false;
};

class TlsChannel {
 public:
  static constexpr std::size_t kPskSize = 32;
  // Runs the handshake over the connected socket `fd` before the deadline (`server`: the accepting
  // side). Errors: auth_failed with OpenSSL's reason (a certificate from another CA, no TLS on the
  // other side, garbage, the other side hung up on us), timeout.
  // With a psk() context, `psk` is the key both sides must hold (32 bytes).
  static Result<std::unique_ptr<TlsChannel>> handshake(const TlsContext& ctx, int fd, bool server,
                                                       Clock::time_point deadline, const std::string& psk = {});
  // The same in steps, for an event loop: begin() makes the session, then after each read into
  // input()/received() step() appends what is to be sent to `flight` and says whether the
  // handshake is done. Errors: auth_failed with OpenSSL's reason. Application data that came
  // with the last handshake flight stays in the input for decrypt().
  static Result<std::unique_ptr<TlsChannel>> begin(const TlsContext& ctx, bool server, const std::string& psk = {});
  Status step(std::string& flight, bool& done);
  bool established() const { return established_; }
  ~TlsChannel();
  TlsChannel(const TlsChannel&) = delete;
  TlsChannel& operator=(const TlsChannel&) = delete;

  // Encrypts n bytes and appends the records to `out`. False (with `why`) on an internal failure.
  bool encrypt(const void* p, std::size_t n, std::string& out, std::string& why);
  // Reading (one thread at a time): decrypt() gives up to n bytes of plaintext into p: the count
  // (> 0), 0 when more ciphertext is needed, or -1 on a forged or broken record or an alert from
  // the other side (`why` says which). After a 0, read from the socket into input() (`room`
  // bytes at most) and report the count with received().
  long decrypt(void* p, std::size_t n, std::string& why);
  char* input(std::size_t& room);
  void received(std::size_t n);
  // Whether records (whole or in part) or decrypted bytes wait in the channel: decrypt() may give
  // more without another read from the socket.
  bool buffered();

  // Blocking, with a deadline, for the messages right after the handshake (the data hello).
  Status write_all(int fd, const void* p, std::size_t n, Clock::time_point deadline);
  Status read_exact(int fd, void* p, std::size_t n, Clock::time_point deadline);
  // The same through `tls` when there is one, else straight on the socket.
  static Status write_all(int fd, TlsChannel* tls, const void* p, std::size_t n, Clock::time_point deadline);
  static Status read_exact(int fd, TlsChannel* tls, void* p, std::size_t n, Clock::time_point deadline);

 private:
  friend struct TlsBio;  // the BIO's callbacks (run inside SSL calls, under mu_)
  TlsChannel() = default;

  std::mutex mu_;  // every SSL_* call on ssl_
  ssl_st* ssl_ = nullptr;
  bool psk_mode_ = false;
  bool established_ = false;
  std::string psk_;  // the key of a psk() session (read by its callbacks)
  std::string* out_ = nullptr;  // where records go during an SSL call that writes
  std::string stray_;           // records written outside encrypt() (an alert from decrypt): sent next
  std::string in_;              // ciphertext from the socket; OpenSSL has taken [0, in_pos_)
  std::size_t in_pos_ = 0, in_end_ = 0;
};

} // namespace chorus
