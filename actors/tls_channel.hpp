// TLS for the data connections between nodes (OpenSSL 3, in user space: this kernel has no kTLS).
// A TlsChannel wraps one SSL object whose input and output are memory BIOs, so OpenSSL never
// touches the socket: the connection's own threads move ciphertext in and out with their socket
// calls, outside the channel's lock, and only the encryption and decryption are serialised. That
// lock is needed because an SSL object must not be used by two threads at once, and a connection
// decrypts on its reader thread while its writer (or an inline sender) encrypts.
// Both sides present a certificate and verify the other's against the CA (TLS 1.3 only). No
// session tickets, renegotiation or key updates: after the handshake every record is application
// data, so the reader never has to write and the writer never has to read.
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "actors/result.hpp"
#include "actors/status.hpp"
#include "actors/wait.hpp"

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
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;
  ssl_ctx_st* native() const { return ctx_; }

 private:
  TlsContext() = default;
  ssl_ctx_st* ctx_ = nullptr;
};

class TlsChannel {
 public:
  // Runs the handshake over the connected socket `fd` before the deadline (`server`: the accepting
  // side). Errors: auth_failed with OpenSSL's reason (a certificate from another CA, no TLS on the
  // other side, garbage, the other side hung up on us), timeout.
  static Result<std::unique_ptr<TlsChannel>> handshake(const TlsContext& ctx, int fd, bool server,
                                                       Clock::time_point deadline);
  ~TlsChannel();
  TlsChannel(const TlsChannel&) = delete;
  TlsChannel& operator=(const TlsChannel&) = delete;

  // Encrypts n bytes and appends the records to `out`. False (with `why`) on an internal failure.
  bool encrypt(const void* p, std::size_t n, std::string& out, std::string& why);
  // Takes n bytes of ciphertext read from the socket.
  void feed(const void* p, std::size_t n);
  // Up to n bytes of plaintext into p: the count (> 0), 0 when more ciphertext is needed, or -1 on
  // a forged or broken record or an alert from the other side (`why` says which).
  long decrypt(void* p, std::size_t n, std::string& why);

  // Blocking, with a deadline, for the messages right after the handshake (the data hello).
  Status write_all(int fd, const void* p, std::size_t n, Clock::time_point deadline);
  Status read_exact(int fd, void* p, std::size_t n, Clock::time_point deadline);

 private:
  TlsChannel() = default;

  std::mutex mu_;  // every SSL_* call on ssl_
  ssl_st* ssl_ = nullptr;
  bio_st* rbio_ = nullptr;  // ciphertext in; owned by ssl_
  bio_st* wbio_ = nullptr;  // ciphertext out; owned by ssl_
};

} // namespace chorus
