#include "mesh/data_seal.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <array>

#include "transport/tls/openssl_init.hpp"

namespace chorus {

// Before main: see keep_openssl_until_exit().
[[maybe_unused]] const bool kDataSealKeepsOpenssl = chorus::keep_openssl_until_exit();

namespace {

// HMAC-SHA256(secret, "chorus data seal" || collective || token), both 64-bit little endian: a
// key per job, which its topology (sent over the sealed control link) and the secret give.
Result<std::string> job_key(const std::string& secret, const TopologyData& topo) {
  static constexpr char kLabel[] = "chorus data seal";
  std::array<unsigned char, sizeof kLabel - 1 + 16> msg{};
  std::copy(kLabel, kLabel + sizeof kLabel - 1, msg.begin());
  for (int i = 0; i < 8; ++i) {
    msg[sizeof kLabel - 1 + i] = static_cast<unsigned char>(topo.collective >> (8 * i));
    msg[sizeof kLabel - 1 + 8 + i] = static_cast<unsigned char>(topo.token >> (8 * i));
  }
  std::array<unsigned char, TlsChannel::kPskSize> key{};
  unsigned len = 0;
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), msg.data(), msg.size(), key.data(), &len) ==
          nullptr ||
      len != key.size())
    return Status(Errc::internal, "OpenSSL could not derive the data connections' key");
  return std::string(reinterpret_cast<const char*>(key.data()), key.size());
}

} // namespace

Result<DataSeal> data_seal(const Config& config, const TopologyData& topo) {
  DataSeal seal;
  if (config.has_tls()) {
    auto ctx = TlsContext::load(config.tls_certificate, config.tls_key, config.tls_ca);
    if (!ctx) return ctx.status();
    seal.context = std::move(*ctx);
  } else if (config.seal_data) {
    if (config.secret.empty())
      return Status(Errc::invalid_config,
                    "seal_data (CHORUS_SEAL_DATA=1) keys the data connections with the secret, and this node has none");
    auto ctx = TlsContext::psk();
    if (!ctx) return ctx.status();
    auto key = job_key(config.secret, topo);
    if (!key) return key.status();
    seal.context = std::move(*ctx);
    seal.psk = std::move(*key);
  }
  return seal;
}

} // namespace chorus
