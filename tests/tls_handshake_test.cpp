// TLS handshakes that must fail, with a clear error within the deadline: a certificate from another
// CA (either side), a plain peer, a silent peer; and certificate files that are missing or do not
// match (tls_harness.hpp). And the handshake keyed by a pre-shared key (TlsContext::psk: the
// front door's sealed links, Config::seal_data): the same key seals, another key or a side with a
// certificate instead does not.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "tls_harness.hpp"

namespace chorus {
namespace {

using namespace std::chrono_literals;
using namespace testing;

TEST(TlsTransport, CertificateFromAnotherCaFailsWithinTheDeadline) {
  NEED_CERTS();
  auto good = Certs::get().context("b", "ca");
  auto stranger = Certs::get().context("stranger", "otherca");
  const auto t0 = Clock::now();
  Pair p = connect_pair(stranger, good, t0 + 10s);
  EXPECT_LT(Clock::now() - t0, 5s);
  EXPECT_EQ(p.client_status.code(), Errc::auth_failed) << p.client_status.to_string();
  EXPECT_NE(p.client_status.message().find("certificate verify failed"), std::string::npos)
      << p.client_status.message();
  EXPECT_EQ(p.server_status.code(), Errc::auth_failed) << p.server_status.to_string();
  EXPECT_EQ(p.client_tls, nullptr);
  EXPECT_EQ(p.server_tls, nullptr);
  ::close(p.client);
  ::close(p.server);
}

// A stranger that trusts our CA but holds a certificate from another one: under TLS 1.3 its own
// handshake completes, and it learns of the refusal from our alert at its first read.
TEST(TlsTransport, RefusedClientCertificateShowsAtTheFirstRead) {
  NEED_CERTS();
  auto good = Certs::get().context("b", "ca");
  auto stranger = Certs::get().context("stranger", "ca");
  ASSERT_NE(stranger, nullptr);
  const auto t0 = Clock::now();
  Pair p = connect_pair(stranger, good, t0 + 10s);
  EXPECT_EQ(p.server_status.code(), Errc::auth_failed) << p.server_status.to_string();
  EXPECT_NE(p.server_status.message().find("certificate verify failed"), std::string::npos)
      << p.server_status.message();
  ::close(p.server);
  if (p.client_tls) {
    char c;
    Status s = p.client_tls->read_exact(p.client, &c, 1, t0 + 10s);
    EXPECT_EQ(s.code(), Errc::auth_failed) << s.to_string();
    EXPECT_NE(s.message().find("alert"), std::string::npos) << s.message();
  } else {
    EXPECT_EQ(p.client_status.code(), Errc::auth_failed) << p.client_status.to_string();
  }
  EXPECT_LT(Clock::now() - t0, 5s);
  ::close(p.client);
}

TEST(TlsTransport, ThePreSharedKeySealsAndNoOtherKeyDoes) {
  auto psk = TlsContext::psk();
  ASSERT_TRUE(psk) << psk.status().to_string();
  const std::string key(TlsChannel::kPskSize, 'k'), other(TlsChannel::kPskSize, 'o');
  const auto t0 = Clock::now();
  Pair p = connect_pair(*psk, *psk, t0 + 10s, {}, key, key);
  ASSERT_TRUE(p.client_status.is_ok() && p.server_status.is_ok())
      << p.client_status.to_string() << " / " << p.server_status.to_string();
  const std::string said = "the job's data, sealed";
  ASSERT_TRUE(p.client_tls->write_all(p.client, said.data(), said.size(), t0 + 10s).is_ok());
  std::string heard(said.size(), '\0');
  ASSERT_TRUE(p.server_tls->read_exact(p.server, heard.data(), heard.size(), t0 + 10s).is_ok());
  EXPECT_EQ(heard, said);
  EXPECT_EQ(p.proxy->wire(0).find("sealed"), std::string::npos) << "the data crossed in the clear";
  ::close(p.client);
  ::close(p.server);

  Pair q = connect_pair(*psk, *psk, Clock::now() + 10s, {}, key, other);
  EXPECT_EQ(q.client_status.code(), Errc::auth_failed) << q.client_status.to_string();
  EXPECT_EQ(q.server_status.code(), Errc::auth_failed) << q.server_status.to_string();
  EXPECT_EQ(q.client_tls, nullptr);
  EXPECT_EQ(q.server_tls, nullptr);
  ::close(q.client);
  ::close(q.server);
  EXPECT_LT(Clock::now() - t0, 5s);
}

TEST(TlsTransport, AKeyAgainstACertificateDoesNotSeal) {
  NEED_CERTS();
  auto psk = TlsContext::psk();
  ASSERT_TRUE(psk) << psk.status().to_string();
  auto certified = Certs::get().context("b", "ca");
  const std::string key(TlsChannel::kPskSize, 'k');
  for (bool psk_connects : {true, false}) {
    Pair p = psk_connects ? connect_pair(*psk, certified, Clock::now() + 10s, {}, key, {})
                          : connect_pair(certified, *psk, Clock::now() + 10s, {}, {}, key);
    EXPECT_EQ(p.client_status.code(), Errc::auth_failed) << psk_connects << " " << p.client_status.to_string();
    EXPECT_EQ(p.server_status.code(), Errc::auth_failed) << psk_connects << " " << p.server_status.to_string();
    ::close(p.client);
    ::close(p.server);
  }
}

TEST(TlsTransport, PlainPeerFails) {
  NEED_CERTS();
  auto ctx = Certs::get().context("a", "ca");
  // A plain node: it sends its hello frame, reads the other's header (garbage here) and hangs up.
  auto plain_node = [](int fd) {
    FrameHeader h;
    h.type = FrameType::hello;
    h.bytes = 40;
    std::string hello(reinterpret_cast<const char*>(&h), sizeof h);
    hello += std::string(40, 'x');
    (void)write_exact(fd, hello.data(), hello.size(), Clock::now() + 5s);
    (void)read_exact(fd, &h, sizeof h, Clock::now() + 2s);
    shutdown(fd, SHUT_RDWR);
  };
  for (bool tls_is_server : {false, true}) {
    const auto deadline = Clock::now() + 10s;
    Pair p = tls_is_server ? connect_pair(nullptr, ctx, deadline, plain_node)
                           : connect_pair(ctx, nullptr, deadline, plain_node);
    const Status& s = tls_is_server ? p.server_status : p.client_status;
    EXPECT_EQ(s.code(), Errc::auth_failed) << (tls_is_server ? "server: " : "client: ") << s.to_string();
    EXPECT_LT(tls_is_server ? p.server_took : p.client_took, 5s) << s.to_string();
    EXPECT_EQ(tls_is_server ? p.server_tls : p.client_tls, nullptr);
    ::close(p.client);
    ::close(p.server);
  }
}

TEST(TlsTransport, SilentPeerTimesOut) {
  NEED_CERTS();
  auto ctx = Certs::get().context("a", "ca");
  const auto t0 = Clock::now();
  Pair p = connect_pair(ctx, nullptr, t0 + 400ms);  // the server side never answers
  const auto took = Clock::now() - t0;
  EXPECT_EQ(p.client_status.code(), Errc::timeout) << p.client_status.to_string();
  EXPECT_GE(took, 350ms);
  EXPECT_LT(took, 3s);
  ::close(p.client);
  ::close(p.server);
}

TEST(TlsTransport, MissingFileIsAConfigError) {
  NEED_CERTS();
  auto r = TlsContext::load(Certs::get().pem("a"), "/nonexistent/a.key", Certs::get().pem("ca"));
  EXPECT_EQ(r.status().code(), Errc::invalid_config);
  EXPECT_NE(r.status().message().find("/nonexistent/a.key"), std::string::npos) << r.status().message();
  auto mismatched = TlsContext::load(Certs::get().pem("a"), Certs::get().key("b"), Certs::get().pem("ca"));
  EXPECT_EQ(mismatched.status().code(), Errc::invalid_config) << mismatched.status().to_string();
}


} // namespace
} // namespace chorus
