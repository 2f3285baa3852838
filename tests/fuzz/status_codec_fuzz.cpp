// Where a job stands (messages/status_codec.hpp) from any envelope, as the orchestrator (a status
// request, a node's answer) and chorus-ctl (the job's status) receive them: every decoder runs
// on the input, what one accepts round-trips, and a job status makes its report.
#include "fuzz_kit.hpp"
#include "messages/status_codec.hpp"

using namespace chorus;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const Envelope e = fuzz::as_envelope(data, size);
  std::string error, again_error;
  if (auto r = decode_status_request(e, error)) {
    auto again = decode_status_request(encode_status_request(*r), again_error);
    FUZZ_CHECK(again.has_value(), "status request does not round-trip");
  } else {
    FUZZ_CHECK(!error.empty(), "a failed decode says why");
  }
  error.clear();
  if (auto n = decode_node_status(e, error)) {
    auto again = decode_node_status(encode_node_status(*n), again_error);
    FUZZ_CHECK(again && *again == *n, "node status does not round-trip: " + again_error);
  } else {
    FUZZ_CHECK(!error.empty(), "a failed decode says why");
  }
  error.clear();
  if (auto j = decode_job_status(e, error)) {
    FUZZ_CHECK(j->status.code() <= last_errc, "an unknown error code was accepted");
    auto again = decode_job_status(encode_job_status(*j), again_error);
    FUZZ_CHECK(again && again->status == j->status && again->nodes == j->nodes && again->silent == j->silent &&
                   again->collective == j->collective && again->complete == j->complete,
               "job status does not round-trip: " + again_error);
    FUZZ_CHECK(!job_status_report(*j).empty(), "a report says something");
  } else {
    FUZZ_CHECK(!error.empty(), "a failed decode says why");
  }
  return 0;
}
