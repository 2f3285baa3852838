// What the fuzz targets (tests/fuzz/*_fuzz.cpp) and the seed maker share: a failed check that
// libFuzzer reports as a crash, hostile bytes fed through a socket, test certificates made in
// memory, a TLS session between two sockets, and the frame check of the data plane's parser.
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "messages/envelope.hpp"
#include "messages/node_codec.hpp"
#include "messages/peer_codec.hpp"
#include "transport/front_door.hpp"
#include "transport/socket.hpp"
#include "transport/tls/tls_channel.hpp"

namespace chorus::fuzz {

// A property that must hold for every input; a failure is a finding (libFuzzer saves the input).
#define FUZZ_CHECK(cond, what)                                                         \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "FUZZ_CHECK failed at %s:%d: %s (%s)\n", __FILE__, __LINE__, \
                   #cond, std::string(what).c_str());                                  \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)

// The input as an envelope: its leading whole words (a trailing partial word is dropped, as no
// sender can put one into an envelope's vector of words).
inline Envelope as_envelope(const uint8_t* data, std::size_t size) {
  Envelope e;
  bytes_envelope(data, size - size % sizeof(uint64_t), e);
  return e;
}

// What the targets and their seeds (make_corpus.cpp) agree on: the secret of the orchestrator and
// the front door, the collective whose data hellos are accepted, and a node's registration (the
// first node of registration_fuzz's collective at 127.0.0.1:7100; a seed at another address).
inline constexpr const char* kSecret = "fuzz-secret";
inline TopologyData hello_topology() {
  TopologyData t;
  t.collective = 7;
  t.node_id = 0;
  t.num_nodes = 3;
  t.token = 0x5eed;
  return t;
}
inline NodeRegisterData node_registration(const std::string& data_address) {
  NodeRegisterData r;
  r.protocol_version = protocol_version();
  r.secret = kSecret;
  r.config.num_devices = 2;
  r.config.num_nodes = 2;
  r.config.orchestrator_address = "127.0.0.1:7000";
  r.config.node_address = data_address;
  r.num_peers = 2;
  r.data_address = data_address;
  r.hardware_threads = 8;
  r.host_key = "host-a";
  r.gpus = 2;
  return r;
}

// A connected pair of stream sockets; closes what it still owns.
struct SocketPair {
  int ours = -1, theirs = -1;  // `theirs` is the end the code under test reads
  SocketPair() {
    int fds[2];
    FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0, "socketpair");
    ours = fds[0];
    theirs = fds[1];
    // Room for any input the targets take (they bound their sizes) and for what the code under
    // test writes back (a TLS server's first flight), so nothing here ever blocks.
    int big = 1 << 20;
    setsockopt(ours, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    setsockopt(theirs, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  }
  ~SocketPair() {
    if (ours >= 0) ::close(ours);
    if (theirs >= 0) ::close(theirs);
  }
  SocketPair(const SocketPair&) = delete;
  SocketPair& operator=(const SocketPair&) = delete;
  // Writes all of `n` bytes at once (never blocking) and, with `end`, says no more will come.
  void send(const void* p, std::size_t n, bool end = true) {
    const int flags = fcntl(ours, F_GETFL);
    fcntl(ours, F_SETFL, flags | O_NONBLOCK);
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      const ssize_t w = ::send(ours, c, n, MSG_NOSIGNAL);
      FUZZ_CHECK(w > 0, "the socket pair took less than the input (input too large for its buffer)");
      c += w;
      n -= static_cast<std::size_t>(w);
    }
    fcntl(ours, F_SETFL, flags);
    if (end) shutdown(ours, SHUT_WR);
  }
};

// A CA and one certificate it signed (P-256: quick to make), written as PEM files into a fresh
// temporary folder, and the TlsContext of a node holding that certificate.
class TestCerts {
 public:
  static const TestCerts& get() {
    static const TestCerts c;
    return c;
  }
  std::shared_ptr<TlsContext> context;

 private:
  static EVP_PKEY* key() { return EVP_EC_gen("P-256"); }
  static X509* cert(EVP_PKEY* subject, const char* cn, X509* issuer, EVP_PKEY* issuer_key, long serial) {
    X509* x = X509_new();
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), serial);
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 3600L * 24 * 365);
    X509_set_pubkey(x, subject);
    X509_NAME* name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn), -1, -1, 0);
    X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : name);
    if (!issuer) {  // a CA: basic constraints and key usage, as OpenSSL's verifier expects
      X509V3_CTX ctx;
      X509V3_set_ctx_nodb(&ctx);
      X509V3_set_ctx(&ctx, x, x, nullptr, nullptr, 0);
      for (auto [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:TRUE"},
                                std::pair{NID_key_usage, "critical,keyCertSign,cRLSign"}}) {
        X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
        X509_add_ext(x, ext, -1);
        X509_EXTENSION_free(ext);
      }
    }
    FUZZ_CHECK(X509_sign(x, issuer_key, EVP_sha256()) > 0, "X509_sign");
    return x;
  }
  static void write(const std::string& path, EVP_PKEY* k, X509* x) {
    FILE* f = std::fopen(path.c_str(), "w");
    FUZZ_CHECK(f, path);
    if (k) PEM_write_PrivateKey(f, k, nullptr, nullptr, 0, nullptr, nullptr);
    if (x) PEM_write_X509(f, x);
    std::fclose(f);
  }
  TestCerts() {
    char tmpl[] = "/tmp/chorus-fuzz-tls-XXXXXX";
    FUZZ_CHECK(mkdtemp(tmpl), "mkdtemp");
    const std::string dir = tmpl;
    EVP_PKEY* ca_key = key();
    EVP_PKEY* node_key = key();
    FUZZ_CHECK(ca_key && node_key, "EVP_EC_gen");
    X509* ca = cert(ca_key, "chorus fuzz CA", nullptr, ca_key, 1);
    X509* node = cert(node_key, "chorus fuzz node", ca, ca_key, 2);
    write(dir + "/ca.pem", nullptr, ca);
    write(dir + "/node.pem", nullptr, node);
    write(dir + "/node.key", node_key, nullptr);
    auto r = TlsContext::load(dir + "/node.pem", dir + "/node.key", dir + "/ca.pem");
    FUZZ_CHECK(r.is_ok(), r.status().to_string());
    context = *r;
    for (const char* f : {"/ca.pem", "/node.pem", "/node.key"}) std::remove((dir + f).c_str());
    rmdir(dir.c_str());
    X509_free(ca);
    X509_free(node);
    EVP_PKEY_free(ca_key);
    EVP_PKEY_free(node_key);
  }
};

// Both ends of a TLS session over a socket pair, handshaken: `client` writes on pair.ours,
// `server` reads on pair.theirs.
struct TlsPair {
  SocketPair pair;
  std::unique_ptr<TlsChannel> client, server;
  TlsPair() {
    const TlsContext& ctx = *TestCerts::get().context;
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    Result<std::unique_ptr<TlsChannel>> c = Status(Errc::internal, "not run");
    std::thread t([&] { c = TlsChannel::handshake(ctx, pair.ours, false, deadline); });
    auto s = TlsChannel::handshake(ctx, pair.theirs, true, deadline);
    t.join();
    FUZZ_CHECK(s.is_ok() && c.is_ok(), s.status().to_string() + " / " + c.status().to_string());
    client = std::move(*c);
    server = std::move(*s);
  }
  // The records of `n` bytes of plaintext from the client.
  std::string seal(const void* p, std::size_t n) {
    std::string out, why;
    FUZZ_CHECK(client->encrypt(p, n, out, why), why);
    return out;
  }
};

// A front door with the fuzz secret in front of a loopback listener (its "orchestrator"), for the
// door's targets: one per process, `seal` as the target asks.
struct DoorSetup {
  int inner = -1;
  uint16_t inner_port = 0;
  std::unique_ptr<FrontDoor> door;
  explicit DoorSetup(bool seal) {
    FUZZ_CHECK(tcp_listen("127.0.0.1", 0, inner, inner_port).is_ok(), "inner listener");
    FrontDoor::Options o;
    o.inner_port = inner_port;
    o.secret = kSecret;
    o.seal = seal;
    auto d = FrontDoor::open(o);
    FUZZ_CHECK(d.is_ok(), d.status().to_string());
    door = std::move(*d);
  }
};

// Everything until the other end closes (a reset ends it too), before the deadline.
inline std::string read_to_end(int fd, Clock::time_point deadline) {
  std::string got;
  char buf[16384];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    FUZZ_CHECK(left > 0, "the connection did not end in time (" + std::to_string(got.size()) + " bytes read)");
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t r = recv(fd, buf, sizeof buf, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return got;
    got.append(buf, static_cast<std::size_t>(r));
  }
}

} // namespace chorus::fuzz
