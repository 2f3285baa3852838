#include "actors/remoting.hpp"

#include <typeindex>

#include "messages/envelope.hpp"
#include "transport/tls/tls_channel.hpp"

namespace chorus {

namespace {
constexpr char kPassageSilence[] = "chorus.passage-silence";  // an array: CAF 0.17's string_view takes one, not a pointer (clang)
}

void load_remoting(caf::actor_system_config& cfg, std::chrono::milliseconds heartbeat, const TlsFiles& tls,
                   std::chrono::milliseconds silence, LinkEnd end) {
  cfg.load<caf::io::middleman>();
  cfg.add_message_type<Envelope>("chorus::envelope");
  if (heartbeat.count() > 0) {
    const caf::timespan limit{silence.count() > 0 ? silence : heartbeat * 4};
    cfg.set("middleman.heartbeat-interval", caf::timespan{heartbeat});
    cfg.set("middleman.connection-timeout", end == LinkEnd::accepting ? limit : caf::timespan{0});
    if (end == LinkEnd::connecting) caf::put(cfg.content, kPassageSilence, limit);
  }
  // The files are kept where CAF keeps its own, but CAF's TLS module is not loaded: the front
  // door and its passages end the links' TLS (transport/), and CAF speaks plain BASP to them.
  if (tls.enabled()) {
    cfg.openssl_certificate = tls.certificate;
    cfg.openssl_key = tls.key;
    cfg.openssl_cafile = tls.ca;
  }
}

void configure_remoting(caf::actor_system_config& cfg, std::chrono::milliseconds heartbeat, const TlsFiles& tls,
                        std::chrono::milliseconds silence, LinkEnd end) {
  load_remoting(cfg, heartbeat, tls, silence, end);
  // Control traffic is rare: the default work-stealing workers would poll every millisecond or
  // so while idle (about a thousand wake-ups a second per process, measured), time the data
  // plane's threads need on a small machine. Sharing workers sleep until there is work.
  cfg.set("scheduler.policy", caf::atom("sharing"));
  cfg.set("scheduler.max-threads", 2);
}

std::string remoting_problem(caf::actor_system& sys, const TlsFiles& tls) {
  if (!sys.has_middleman()) return "its actor system has no middleman (CAF remoting)";
  if (!sys.config().type_names_by_rtti.count(std::type_index(typeid(Envelope))))
    return "its actor system does not know chorus's message type";
  if (caf::get_or(sys.config(), "middleman.heartbeat-interval", caf::timespan{0}).count() <= 0)
    return "its actor system sends no BASP heartbeats (the orchestrator drops a silent node)";
  if (tls.enabled() && !uses_tls(sys)) return "TLS files are set but its actor system does not use TLS";
  if (!tls.enabled() && uses_tls(sys)) return "its actor system uses TLS but no TLS files are set";
  return {};
}

std::chrono::milliseconds passage_silence(const caf::actor_system& sys) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
      caf::get_or(sys.config(), kPassageSilence, caf::timespan{0}));
}

TlsFiles tls_files(caf::actor_system& sys) {
  const auto& c = sys.config();
  return {c.openssl_certificate, c.openssl_key, c.openssl_cafile};
}

bool uses_tls(caf::actor_system& sys) { return tls_files(sys).enabled(); }

Result<std::shared_ptr<TlsContext>> tls_context(caf::actor_system& sys) {
  const TlsFiles files = tls_files(sys);
  if (!files.enabled()) return std::shared_ptr<TlsContext>();
  return TlsContext::load(files.certificate, files.key, files.ca);
}

} // namespace chorus
