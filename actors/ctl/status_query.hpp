// chorus-ctl status: asks a job's orchestrator where every node stands (it asks each node's actor,
// see actors/orchestrator/orchestrator.hpp), from an actor system of its own.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

#include <chorus/result.hpp>
#include "actors/remoting.hpp"
#include "messages/status_codec.hpp"

namespace chorus {

// The job's status, or why there is none (unreachable, another protocol, no answer in `timeout`,
// or the orchestrator's refusal: a wrong secret, or "no secret given" when `secret` is empty and
// the orchestrator has one). TLS when `tls` is set, as the job's nodes use.
Result<JobStatusData> query_job_status(const std::string& host, uint16_t port, const std::string& secret,
                                       const TlsFiles& tls, std::chrono::milliseconds timeout);

} // namespace chorus
