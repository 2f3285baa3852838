// The accepting side of a data connection's TLS handshake (transport/tls/tls_channel.cpp,
// TlsChannel::handshake with server = true) reading hostile bytes: the input is all the client
// sends before it closes. The handshake must fail, with auth_failed (no input can prove a
// certificate from the CA), and neither hang nor crash; what the server writes back is read and
// dropped by the socket pair.
#include "fuzz_kit.hpp"

using namespace chorus;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size > (std::size_t{64} << 10)) return 0;
  const TlsContext& ctx = *fuzz::TestCerts::get().context;
  fuzz::SocketPair pair;
  pair.send(data, size);
  const auto start = Clock::now();
  auto r = TlsChannel::handshake(ctx, pair.theirs, true, start + std::chrono::seconds(5));
  FUZZ_CHECK(!r.is_ok(), "a handshake completed on bytes that hold no certificate's proof");
  FUZZ_CHECK(r.status().code() == Errc::auth_failed, r.status().to_string());
  FUZZ_CHECK(Clock::now() - start < std::chrono::seconds(4), "the handshake waited on a closed connection");
  return 0;
}
