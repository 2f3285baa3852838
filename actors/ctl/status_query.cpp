#include "actors/ctl/status_query.hpp"

#include "actors/global_client/node_session.hpp"
#include "actors/orchestrator/orchestrator.hpp"

namespace chorus {

Result<JobStatusData> query_job_status(const std::string& host, uint16_t port, const std::string& secret,
                                       const TlsFiles& tls, std::chrono::milliseconds timeout) {
  const std::string where = host + ":" + std::to_string(port);
  caf::actor_system_config cfg;
  configure_remoting(cfg, std::chrono::milliseconds{0}, tls);
  caf::actor_system sys{cfg};
  auto orch = connect_orchestrator(sys, host, port, secret, std::chrono::steady_clock::now() + timeout);
  // The door says "wrong secret" to a missing one as well; the asker knows which it was.
  if (!orch && orch.status().code() == Errc::auth_failed && secret.empty())
    return Status(Errc::auth_failed, "no secret given, and the orchestrator at " + where + " wants one");
  if (!orch) return orch.status();
  Result<JobStatusData> out = Status(Errc::internal, "no answer");
  caf::scoped_actor self{sys};
  self->request(*orch, timeout, status_atom::value, encode_status_request({}))
      .receive(
          [&](Envelope& reply) {
            std::string error;
            auto j = decode_job_status(reply, error);
            if (!j) out = Status(Errc::internal, "the orchestrator at " + where + " answered garbled: " + error);
            else if (!j->status) out = j->status;
            else out = std::move(*j);
          },
          [&](caf::error& err) {
            out = Status(err == caf::sec::request_timeout ? Errc::timeout : Errc::unreachable,
                         "the orchestrator at " + where + " did not answer: " + sys.render(err));
          });
  return out;
}

} // namespace chorus
