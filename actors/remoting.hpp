// CAF remoting for the control plane (orchestrator <-> nodes): the actor-system settings, and
// publishing / connecting. CAF speaks plain BASP, only on loopback or a socket pair: the links
// between hosts go through the orchestrator's front door and the nodes' passages, which end their
// TLS (keyed by the secret, or with the certificates of TlsFiles: transport/front_door.hpp).
#pragma once
#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <chrono>
#include <memory>
#include <string>

#include <chorus/result.hpp>

namespace chorus {

class TlsContext;  // transport/tls/tls_channel.hpp

struct TlsFiles {
  std::string certificate;  // PEM: this side's certificate
  std::string key;          // PEM: its private key
  std::string ca;           // PEM: the CA that signed the other sides' certificates
  bool enabled() const { return !certificate.empty() || !key.empty() || !ca.empty(); }
};

// Which end of the orchestrator's links an actor system is.
//  accepting: the orchestrator. CAF drops a connection silent for `silence`: a frozen node shows
//    up as a down message.
//  connecting: a node (or a tool). Its door passage (transport/door_passage.hpp) closes the link
//    once the orchestrator has been silent for `silence`, and CAF's own check is off: CAF 0.17
//    counts a connecting side's silence from time zero, so a heartbeat tick that falls inside a
//    slow handshake (TLS on a loaded machine) would drop the new connection.
enum class LinkEnd { accepting, connecting };

// Loads the middleman and registers chorus::Envelope for remote use ("chorus::envelope").
// heartbeat > 0: this side sends BASP heartbeats at that interval and drops a link silent for
// `silence` (default 4 intervals), as `end` says.
// Both sides must send heartbeats, or the checking side drops a healthy idle peer.
// tls.enabled(): the system records its TLS files (tls_files()), which its door or passages use.
void load_remoting(caf::actor_system_config& cfg, std::chrono::milliseconds heartbeat = std::chrono::milliseconds{0},
                   const TlsFiles& tls = {}, std::chrono::milliseconds silence = std::chrono::milliseconds{0},
                   LinkEnd end = LinkEnd::connecting);
// load_remoting() plus the scheduler chorus's own actor systems run: `sharing`, two workers.
void configure_remoting(caf::actor_system_config& cfg,
                        std::chrono::milliseconds heartbeat = std::chrono::milliseconds{0},
                        const TlsFiles& tls = {}, std::chrono::milliseconds silence = std::chrono::milliseconds{0},
                        LinkEnd end = LinkEnd::connecting);
// The silence after which a connecting system's door passages drop the orchestrator (0: never).
std::chrono::milliseconds passage_silence(const caf::actor_system& sys);
// A node's link to the orchestrator: heartbeats often (the orchestrator drops a node silent for 4
// of its own intervals, 800 ms at --heartbeat-ms 200, and a loaded machine must not look frozen),
// and a frozen orchestrator noticed after 10 s of silence (the daemon's interval is not known here).
inline constexpr std::chrono::milliseconds kNodeHeartbeat{100};
inline constexpr std::chrono::milliseconds kNodeLinkSilence{10000};

// Whether the TLS calls CAF makes go through chorus's wrappers, which clear OpenSSL's error queue
// first (actors/openssl_error_queue.cpp): true where chorus is linked into the executable.
bool tls_calls_clear_error_queue();
// Whether `sys` was configured with TLS files, and which.
bool uses_tls(caf::actor_system& sys);
TlsFiles tls_files(caf::actor_system& sys);
// The TLS context of those files for the links the door or a passage ends (null: no files);
// invalid_config naming a file that cannot be loaded.
Result<std::shared_ptr<TlsContext>> tls_context(caf::actor_system& sys);
// What is wrong with `sys` for talking to an orchestrator with `tls` (no middleman, chorus's
// message type not registered, TLS files set on one side only), or "" when nothing is.
std::string remoting_problem(caf::actor_system& sys, const TlsFiles& tls);
// Publishes `a` on host:port (port 0: any free port). Plain BASP: the links that leave the host
// are TLS at the front door and its passages (transport/), never in CAF.
template <class Handle>
caf::expected<uint16_t> publish_remote(caf::actor_system& sys, const Handle& a, uint16_t port,
                                       const std::string& host) {
  return sys.middleman().publish(a, port, host.c_str(), true);
}
// Connects to the actor published on host:port (a door passage's loopback port). A typed Handle
// is checked against the interface the other side published.
template <class Handle = caf::actor>
caf::expected<Handle> connect_remote(caf::actor_system& sys, const std::string& host, uint16_t port) {
  return sys.middleman().remote_actor<Handle>(host, port);
}

} // namespace chorus
