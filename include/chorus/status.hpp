// Error codes and the Status every chorus call returns. Each code is distinct so callers can act
// on it; the message names the peers and values involved.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace chorus {

enum class Errc : uint16_t {
  ok = 0,
  invalid_config,      // the configuration is invalid (the message names the field)
  register_twice,      // a peer id registered while already registered
  unregister_twice,    // finish called by a peer that already finished
  not_registered,      // an op before register (or with an unknown peer id)
  config_mismatch,     // register with a config that differs from the first peer's
  shape_mismatch,      // peers of one op disagree on the shape
  dtype_mismatch,      // ... on the dtype
  op_mismatch,         // ... on the op kind
  reduce_op_mismatch,  // ... on the reduce op
  root_mismatch,       // ... on the root
  no_data,             // broadcast/scatter where no peer supplied the data
  multiple_data,       // broadcast/scatter where several peers supplied the data
  timeout,             // some peers never called (the message names them)
  finished,            // an op after finish
  invalid_argument,    // bad input to one call: bitwise op on floats, bad root, buffer too small...
  reset,               // the op was cancelled by a reset of the collective
  internal,            // a bug in chorus; please report it
  node_lost,           // another node of the collective died, froze, or left (the message names it)
  auth_failed,         // wrong shared secret or data-plane token
  version_mismatch,    // another side speaks a different protocol version
  busy,                // the orchestrator's collective is already complete
  unreachable,         // the orchestrator or another node could not be reached in time
  device_mismatch,     // peers of one op pass tensors on different kinds of device (host vs GPU)
  device_error,        // a CUDA or NCCL failure, or no such GPU (the message carries CUDA's text)
  revoked,             // the communicator was revoked or shrunk past (Peer::revoke, Peer::shrink)
};
inline constexpr Errc last_errc = Errc::revoked;

std::string_view to_string(Errc c);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Errc code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok() { return {}; }

  bool is_ok() const { return code_ == Errc::ok; }
  explicit operator bool() const { return is_ok(); }
  Errc code() const { return code_; }
  const std::string& message() const { return message_; }
  // "timeout: all_reduce #3: peers 2, 3 never called within 1000 ms"
  std::string to_string() const;
  bool operator==(const Status& o) const { return code_ == o.code_ && message_ == o.message_; }

 private:
  Errc code_ = Errc::ok;
  std::string message_;
};

} // namespace chorus
