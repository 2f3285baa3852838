// CAF remoting for the control plane (orchestrator <-> nodes): the actor-system settings, and
// publishing / connecting with or without TLS (libcaf-openssl, mutually authenticated when a CA is
// given: each side presents its certificate and checks the other's against the CA).
#pragma once
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include <chrono>
#include <string>

namespace chorus {

struct TlsFiles {
  std::string certificate;  // PEM: this side's certificate
  std::string key;          // PEM: its private key
  std::string ca;           // PEM: the CA that signed the other sides' certificates
  bool enabled() const { return !certificate.empty() || !key.empty() || !ca.empty(); }
};

// Loads the middleman and registers chorus::Envelope for remote use ("chorus::envelope").
// heartbeat > 0: BASP heartbeats at that interval, and a connection silent for 4 intervals is
// dropped (a frozen peer process then shows up as a down message within ~5 intervals).
// tls.enabled(): every connection of this actor system uses TLS (libcaf-openssl).
void configure_remoting(caf::actor_system_config& cfg,
                        std::chrono::milliseconds heartbeat = std::chrono::milliseconds{0},
                        const TlsFiles& tls = {});

// Whether `sys` was configured with TLS.
bool uses_tls(caf::actor_system& sys);
// Publishes `a` on host:port (port 0: any free port) with TLS when `sys` uses it.
template <class Handle>
caf::expected<uint16_t> publish_remote(caf::actor_system& sys, const Handle& a, uint16_t port,
                                       const std::string& host) {
  if (uses_tls(sys)) return caf::openssl::publish(a, port, host.c_str(), true);
  return sys.middleman().publish(a, port, host.c_str(), true);
}
// Connects to the actor published on host:port, with TLS when `sys` uses it. A typed Handle is
// checked against the interface the other side published.
template <class Handle = caf::actor>
caf::expected<Handle> connect_remote(caf::actor_system& sys, const std::string& host, uint16_t port) {
  if (uses_tls(sys)) return caf::openssl::remote_actor<Handle>(sys, host, port);
  return sys.middleman().remote_actor<Handle>(host, port);
}

} // namespace chorus
