#include "actors/remoting.hpp"


#include "messages/envelope.hpp"

namespace chorus {

void configure_remoting(caf::actor_system_config& cfg, std::chrono::milliseconds heartbeat, const TlsFiles& tls) {
  cfg.load<caf::io::middleman>();
  // Control traffic is rare: the default work-stealing workers would poll every millisecond or
  // so while idle (about a thousand wake-ups a second per process, measured), time the data
  // plane's threads need on a small machine. Sharing workers sleep until there is work.
  cfg.set("scheduler.policy", caf::atom("sharing"));
  cfg.set("scheduler.max-threads", 2);
  cfg.add_message_type<Envelope>("chorus::envelope");
  if (heartbeat.count() > 0) {
    cfg.set("middleman.heartbeat-interval", caf::timespan{heartbeat});
    cfg.set("middleman.connection-timeout", caf::timespan{heartbeat * 4});
  }
  if (tls.enabled()) {
    cfg.openssl_certificate = tls.certificate;
    cfg.openssl_key = tls.key;
    cfg.openssl_cafile = tls.ca;
    cfg.load<caf::openssl::manager>();
  }
}

bool uses_tls(caf::actor_system& sys) {
  const auto& c = sys.config();
  return !c.openssl_certificate.empty() || !c.openssl_key.empty() || !c.openssl_cafile.empty();
}

} // namespace chorus
