// How this job's data connections between nodes are sealed: TLS with the certificate files of
// Config (mutually authenticated), TLS keyed by the secret and the job's token (Config::seal_data:
// no certificates; the key is the same at every node of the job and at no other), or neither.
#pragma once
#include <memory>
#include <string>

#include <chorus/config.hpp>
#include <chorus/result.hpp>
#include "messages/node_codec.hpp"
#include "transport/tls/tls_channel.hpp"

namespace chorus {

struct DataSeal {
  std::shared_ptr<TlsContext> context;  // null: plain TCP
  std::string psk;                      // with a TlsContext::psk() context: the job's key

  // The TLS handshake on a new data connection (`server`: the accepting side).
  Result<std::unique_ptr<TlsChannel>> handshake(int fd, bool server, Clock::time_point deadline) const {
    return TlsChannel::handshake(*context, fd, server, deadline, psk);
  }
};

// invalid_config when a certificate file cannot be loaded, or seal_data has no secret to key it.
Result<DataSeal> data_seal(const Config& config, const TopologyData& topo);

} // namespace chorus
